package nn

import (
	"fmt"

	"github.com/forgeml/forge/forge"
)

// MoE is a mixture-of-experts feed-forward layer: a softmax router picks
// k of E expert MLPs for every token, and the token's output is the sum
// of the chosen experts' outputs weighted by their renormalised gates.
// With N tokens x (N, C):
//
//	p      = softmax(x·Wrᵀ)                 (N, E)  router probabilities, Wr (E, C), no bias
//	top(n) = the k largest p[n, e]          ties: the lowest expert index first
//	g[n,j] = p[n, top(n)_j] / Σ_j' p[n, top(n)_j']   (N, k) gates, sum 1 per token
//	y[n]   = Σ_j g[n,j] · expert_{top(n)_j}(x[n])
//
// The gates are differentiable through the selected probabilities (the
// selection itself is piecewise constant and has no gradient). With k = 1
// the renormalised gate is exactly 1, so the router learns from the
// load-balancing loss alone (Switch Transformer's top-1 gate p[n, e]
// would differ here).
//
// # Dispatch
//
// The forward is sparse: the router's probabilities are read on the host
// (one device sync per MoE layer and forward — on Metal a step is then
// several command buffers, not one), the N·k (token, expert) pairs are
// sorted by expert on the host (a counting sort, O(N·k)), one IndexSelect
// gathers their rows (N·k, C), each
// expert runs on its own contiguous block of n_e rows, the outputs are
// scaled by their gates and one IndexAdd scatters them back into (N, C).
// The expert matmuls cost 2·N·k·(MLP weights) FLOPs whatever E is; the
// router's N·C·E is the only term that grows with E. An expert that
// receives no token is not run. Because an expert's matmul covers the
// rows routed to it, a token's output can differ in the last float32 bit
// with the other tokens of the batch (BLAS blocks by row count).
//
// Dense (the test oracle) instead runs every expert on every token and
// weights them by gates that are zero for the unselected experts.
//
// # Load-balancing loss
//
// Each forward also computes the Switch-Transformer auxiliary loss
//
//	aux = E · Σ_e f_e · P_e
//	f_e = (number of the N·k (token, slot) assignments that chose e) / (N·k)   no gradient
//	P_e = (1/N) · Σ_n p[n, e]                                                   differentiable
//
// so Σ_e f_e = 1 for every k: aux is 1 when the assignments are balanced
// (f_e = 1/E) or the router is uniform (P_e = 1/E), and up to E when one
// expert takes everything; k enters only through f's normalisation by
// N·k. TakeAux hands it to the model's loss, which adds
// coef·aux (gpt.Config.MoEAuxCoef). Experts that received no token get
// 0·Σ(their parameters) added to aux, so their gradients are zeros rather
// than missing — the same as the dense oracle's — and the optimizer and
// the gradient clip see every parameter every step.
type MoE struct {
	Router  *Linear // (E, C), no bias
	Experts []*MLP  // E experts of one kind, each (C → F → C)
	TopK    int     // k, 1 ≤ k ≤ E
	Dense   bool    // run every expert on every token (the oracle); the sparse dispatch otherwise

	stats RouterStats
	aux   *forge.Tensor // scalar, of the last forward
}

// RouterStats are the routing of a MoE layer's last forward.
type RouterStats struct {
	Tokens []int   // (E) assignments per expert; they sum to k·N
	Aux    float64 // the load-balancing loss (computed on the host, no sync)
}

// NewMoE builds a MoE layer of experts MLPs of the given kind ("swiglu" or
// "gelu") and hidden size f, routing every token to k of them. The
// router is initialised N(0, std²) like the other matrices; outStd
// initialises each expert's Down.
func NewMoE(in Init, kind string, dim, f, experts, k int, bias bool, std, outStd float64) *MoE {
	if experts < 1 || k < 1 || k > experts {
		panic(errorf("moe", "%d experts, top-k %d: want 1 <= k <= experts", experts, k))
	}
	m := &MoE{Router: NewLinear(in, dim, experts, false, std), TopK: k}
	for range experts {
		m.Experts = append(m.Experts, NewMLP(in, kind, dim, f, bias, std, outStd))
	}
	return m
}

// Forward maps x (…, C) to (…, C).
func (m *MoE) Forward(x *forge.Tensor) *forge.Tensor {
	m.Router.check(x)
	E, k := len(m.Experts), m.TopK
	shape := x.Shape()
	C := x.Size(-1)
	N := x.Numel() / C
	x2 := x.Reshape(N, C)
	// The router in the weights' dtype, also under mixed precision: the
	// selection should not depend on 16-bit rounding of the logits.
	probs := m.Router.Forward(x2.Cast(m.Router.Weight.DType())).Softmax(-1) // (N, E)

	pv := probs.Float64s()   // the one sync
	top := topK(pv, N, E, k) // (N·k) expert ids, token-major
	m.route(probs, pv, top, N)

	// The dispatch gathers and scatters rows with the index kernels; where
	// the device has none for x's dtype (Metal's are 32-bit), the rows
	// travel in float32 — exact for 16-bit inputs, and the experts' linear
	// layers still multiply in their compute dtype.
	if !x2.Device().Supports("index", x2.DType()) {
		x2 = x2.Cast(forge.Float32)
	}
	var y *forge.Tensor // (N, C)
	if m.Dense {
		y = m.dense(x2, probs, top, N)
	} else {
		y = m.sparse(x2, probs, top, N)
	}
	return y.Reshape(shape...)
}

// sparse runs each expert on its routed rows only.
func (m *MoE) sparse(x2, probs *forge.Tensor, top []int32, N int) *forge.Tensor {
	E, k := len(m.Experts), m.TopK
	dev := x2.Device()
	// The assignments grouped by expert, tokens ascending within one:
	// rows[i] is the token and slot[i] its position n·k+j in top.
	// A counting sort: O(N·k) whatever E is.
	next := make([]int, E) // where expert e's next assignment goes
	for e := 1; e < E; e++ {
		next[e] = next[e-1] + m.stats.Tokens[e-1]
	}
	rows := make([]int32, N*k)
	slot := make([]int32, N*k)
	for i, e := range top {
		rows[next[e]], slot[next[e]] = int32(i/k), int32(i)
		next[e]++
	}
	rowsT := forge.FromSlice(rows).To(dev)
	gates := m.gates(probs, top, N).Reshape(N*k).IndexSelect(0, forge.FromSlice(slot).To(dev)) // (N·k)

	xs := x2.IndexSelect(0, rowsT) // (N·k, C) grouped by expert
	var ys []*forge.Tensor
	off := 0
	for e, n := range m.stats.Tokens {
		if n == 0 {
			continue
		}
		ys = append(ys, m.Experts[e].Forward(xs.Narrow(0, off, n))) // (n_e, C)
		off += n
	}
	yc := forge.Concat(0, ys...)                        // (N·k, C)
	yc = yc.Mul(gates.Reshape(N*k, 1).Cast(yc.DType())) // gate each row
	// A fresh copy of the rows for the scatter: IndexAdd reads its indices
	// back to check them, and the gather queued above still uses rowsT
	// (reading that would wait for the device).
	return forge.ZerosLike(x2).IndexAdd(0, forge.FromSlice(rows).To(dev), yc) // (N, C); experts keep x2's dtype
}

// dense is the oracle: every expert on every token, the unselected ones
// weighted by zero.
func (m *MoE) dense(x2, probs *forge.Tensor, top []int32, N int) *forge.Tensor {
	E, k := len(m.Experts), m.TopK
	mask := make([]float64, N*E)
	for i, e := range top {
		mask[i/k*E+int(e)] = 1
	}
	pm := probs.Mul(constLike(probs, mask, N, E)) // (N, E)
	g := pm.Div(pm.SumKeep(1))                    // (N, E)
	var y *forge.Tensor
	for e, ex := range m.Experts {
		ye := ex.Forward(x2)
		ye = ye.Mul(g.Narrow(1, e, 1).Cast(ye.DType()))
		if y == nil {
			y = ye
		} else {
			y = y.Add(ye)
		}
	}
	return y
}

// gates returns the renormalised gates (N, k) of the chosen experts.
func (m *MoE) gates(probs *forge.Tensor, top []int32, N int) *forge.Tensor {
	sel := probs.Gather(1, forge.FromSlice(top, N, m.TopK).To(probs.Device())) // (N, k)
	return sel.Div(sel.SumKeep(1))
}

// route records the statistics of a forward and builds its aux loss.
func (m *MoE) route(probs *forge.Tensor, pv []float64, top []int32, N int) {
	E, k := len(m.Experts), m.TopK
	counts := make([]int, E)
	for _, e := range top {
		counts[e]++
	}
	f := make([]float64, E)
	aux := 0.0
	for e := range E {
		f[e] = float64(counts[e]) / float64(N*k)
		pe := 0.0
		for n := range N {
			pe += pv[n*E+e]
		}
		aux += f[e] * pe / float64(N)
	}
	m.stats = RouterStats{Tokens: counts, Aux: float64(E) * aux}
	ft := constLike(probs, f, E)
	a := probs.Mean(0).Mul(ft).Sum().MulScalar(float64(E))
	if forge.GradEnabled() {
		for e, n := range counts {
			if n > 0 || m.Dense {
				continue
			}
			for _, p := range m.Experts[e].Params() {
				a = a.Add(p.Tensor.Sum().Cast(a.DType()).MulScalar(0))
			}
		}
	}
	m.aux = a
}

// constLike returns v as a tensor of t's dtype and device (float64 on the
// host only for a float64 t: a GPU device has no float64).
func constLike(t *forge.Tensor, v []float64, shape ...int) *forge.Tensor {
	var c *forge.Tensor
	if t.DType() == forge.Float64 {
		c = forge.FromSlice(v, shape...)
	} else {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		c = forge.FromSlice(f, shape...).Cast(t.DType())
	}
	return c.To(t.Device())
}

// topK returns, for each of n rows of p (n, e), the indices of its k
// largest entries in descending order, equal values by ascending index:
// (n·k) int32, row-major.
func topK(p []float64, n, e, k int) []int32 {
	out := make([]int32, n*k)
	for r := range n {
		row := p[r*e : (r+1)*e]
		sel := out[r*k : (r+1)*k]
		for j := range sel {
			best := -1
			for c, v := range row {
				if taken(sel[:j], c) {
					continue
				}
				if best < 0 || v > row[best] {
					best = c
				}
			}
			sel[j] = int32(best)
		}
	}
	return out
}

func taken(sel []int32, c int) bool {
	for _, s := range sel {
		if int(s) == c {
			return true
		}
	}
	return false
}

// Stats returns the routing of the last forward (zero before the first).
func (m *MoE) Stats() RouterStats { return m.stats }

// TakeAux returns the load-balancing loss of the last forward (a scalar
// tensor in the router's dtype) and forgets it, so the layer keeps no
// graph alive; nil if there was none.
func (m *MoE) TakeAux() *forge.Tensor {
	a := m.aux
	m.aux = nil
	return a
}

// Linears returns every linear layer of the experts (not the router,
// which stays in its weights' dtype under mixed precision).
func (m *MoE) Linears() []*Linear {
	var ls []*Linear
	for _, ex := range m.Experts {
		if ex.Gate != nil {
			ls = append(ls, ex.Gate)
		}
		ls = append(ls, ex.Up, ex.Down)
	}
	return ls
}

// Params implements Module: router.weight, then experts.{e}.w_gate/w_up/
// w_down as in MLP.
func (m *MoE) Params() []Param {
	ps := Prefix("router", m.Router.Params())
	for e, ex := range m.Experts {
		ps = append(ps, Prefix(fmt.Sprintf("experts.%d", e), ex.Params())...)
	}
	return ps
}
