package nn

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge"
)

// moeFixture is a MoE layer whose router ties experts 1 and 2 on every
// token (equal rows) and never picks expert 3 (a logit of −30 through a
// constant input feature), with the input and upstream gradient of a
// test. Feature 0 of x is 1; the router reads it only for expert 3.
func moeFixture(t *testing.T, kind string, k int, dt forge.DType) (*MoE, *forge.Tensor, *forge.Tensor) {
	t.Helper()
	const E, C, F, N = 4, 8, 12, 13
	in := Init{Gen: forge.NewGenerator(7), DType: dt}
	m := NewMoE(in, kind, C, F, E, k, true, 0.4, 0.3)
	w := m.Router.Weight.Float64s() // (E, C)
	for c := range C {
		w[0*C+c] *= 3 // a router that prefers different experts for different tokens
		w[2*C+c] = w[1*C+c]
		w[3*C+c] = 0
		if c == 0 {
			w[0*C], w[1*C], w[2*C], w[3*C] = 0, 0, 0, -30
		}
	}
	forge.NoGrad(func() { m.Router.Weight.CopyFrom(constOf(dt, w, E, C)) })
	g := forge.NewGenerator(8)
	xv := g.Randn(forge.Float32, N, C).Float64s()
	for n := range N {
		xv[n*C] = 1
	}
	x := constOf(dt, xv, N, C).RequiresGrad()
	r := constOf(dt, g.Randn(forge.Float32, N, C).Float64s(), N, C)
	return m, x, r
}

func constOf(dt forge.DType, v []float64, shape ...int) *forge.Tensor {
	if dt == forge.Float64 {
		return forge.FromSlice(v, shape...)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return forge.FromSlice(f, shape...).Cast(dt)
}

// moeRun runs loss = Σ y·r + coef·aux and returns y, the loss, and the
// gradients of x and of every parameter (nil where there is none).
func moeRun(m *MoE, x, r *forge.Tensor, coef float64) (y []float64, loss float64, grads map[string][]float64) {
	x.ZeroGrad()
	for _, p := range m.Params() {
		p.Tensor.ZeroGrad()
		p.Tensor.ReleaseGrad()
	}
	out := m.Forward(x)
	l := out.Mul(r).Sum().Add(m.TakeAux().MulScalar(coef))
	l.Backward()
	grads = map[string][]float64{"x": x.Grad().Float64s()}
	for _, p := range m.Params() {
		if g := p.Tensor.Grad(); g != nil {
			grads[p.Name] = g.Float64s()
		} else {
			grads[p.Name] = nil
		}
	}
	return out.Float64s(), l.Item(), grads
}

// The sparse dispatch equals the dense oracle — forward, the aux loss and
// every gradient — with a router tie and experts that receive no token.
// Both paths round differently only in the order of the gate sums and in
// the matmuls over row subsets: a few float32 ulps of values O(1).
func TestMoESparseEqualsDense(t *testing.T) {
	for _, kind := range []string{"swiglu", "gelu"} {
		for _, k := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/k%d", kind, k), func(t *testing.T) {
				m, x, r := moeFixture(t, kind, k, forge.Float32)
				ys, ls, gs := moeRun(m, x, r, 0.7)
				st := m.Stats()
				m.Dense = true
				yd, ld, gd := moeRun(m, x, r, 0.7)
				if !slices.Equal(m.Stats().Tokens, st.Tokens) || m.Stats().Aux != st.Aux {
					t.Fatalf("routing differs: sparse %+v, dense %+v", st, m.Stats())
				}
				// The constructed router: expert 3 never chosen; with k=1 the
				// tie of 1 and 2 always goes to 1 (the lower index).
				if st.Tokens[3] != 0 || k == 1 && st.Tokens[2] != 0 {
					t.Fatalf("tokens per expert %v: want none for expert 3 (and 2 when k=1)", st.Tokens)
				}
				if k > 1 && st.Tokens[2] == 0 {
					t.Fatalf("tokens per expert %v: the fixture should route some tokens to expert 2 when k=%d", st.Tokens, k)
				}
				if sum := st.Tokens[0] + st.Tokens[1] + st.Tokens[2] + st.Tokens[3]; sum != 13*k {
					t.Fatalf("tokens per expert %v sum to %d, want N·k = %d", st.Tokens, sum, 13*k)
				}
				const tol = 2e-6
				worst := relDiff(ys, yd)
				worst = max(worst, math.Abs(ls-ld)/max(1, math.Abs(ld)))
				for name, want := range gd {
					got := gs[name]
					if got == nil {
						t.Fatalf("%s: no gradient on the sparse path", name)
					}
					worst = max(worst, relDiff(got, want))
				}
				if worst > tol {
					t.Errorf("sparse vs dense: worst relative difference %.2e > %.0e", worst, tol)
				}
				t.Logf("sparse = dense, maxdiff %.1e (tokens per expert %v, aux %.4f)", worst, st.Tokens, st.Aux)
				for _, name := range []string{"experts.3.w_up.weight", "experts.3.w_down.bias"} {
					for _, v := range gs[name] {
						if v != 0 {
							t.Fatalf("%s: expert 3 received no token, but its gradient has %g", name, v)
						}
					}
				}
			})
		}
	}
}

// relDiff is max |a−b| relative to max(1, max |b|).
func relDiff(a, b []float64) float64 {
	scale, d := 1.0, 0.0
	for i := range b {
		scale = max(scale, math.Abs(b[i]))
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d / scale
}

// The gradients through the gates and the aux loss match float64 central
// differences (the routing stays fixed: the fixture's margins between
// the k-th and the next probability are far above the step).
func TestMoEGradFiniteDifferences(t *testing.T) {
	skipNoFloat64(t)
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k%d", k), func(t *testing.T) {
			m, x, r := moeFixture(t, "swiglu", k, forge.Float64)
			// No ties here: a perturbation must not move the selection.
			w := m.Router.Weight.Float64s()
			for c := range 8 {
				w[2*8+c] += 0.3 * math.Sin(float64(c))
			}
			forge.NoGrad(func() { m.Router.Weight.CopyFrom(forge.FromSlice(w, 4, 8)) })
			const coef = 0.9
			_, _, grads := moeRun(m, x, r, coef)
			before := m.Stats().Tokens
			loss := func() float64 {
				var l float64
				forge.NoGrad(func() { l = m.Forward(x).Mul(r).Sum().Add(m.TakeAux().MulScalar(coef)).Item() })
				return l
			}
			checks := map[string]*forge.Tensor{"x": x}
			for _, name := range []string{"router.weight", "experts.0.w_gate.weight", "experts.1.w_up.bias", "experts.2.w_down.weight"} {
				p, _ := Find(m, name)
				checks[name] = p
			}
			const h = 1e-6
			worst := 0.0
			for name, p := range checks {
				v := p.Float64s()
				for i := range v {
					at := func(d float64) float64 {
						u := slices.Clone(v)
						u[i] += d
						forge.NoGrad(func() { p.CopyFrom(forge.FromSlice(u, p.Shape()...)) })
						return loss()
					}
					num := (at(h) - at(-h)) / (2 * h)
					forge.NoGrad(func() { p.CopyFrom(forge.FromSlice(v, p.Shape()...)) })
					d := math.Abs(num-grads[name][i]) / max(1, math.Abs(num))
					if d > 1e-6 {
						t.Errorf("%s[%d]: analytic %.9g, central difference %.9g", name, i, grads[name][i], num)
					}
					worst = max(worst, d)
				}
			}
			if !slices.Equal(before, m.Stats().Tokens) {
				t.Fatalf("routing moved during the check: %v then %v", before, m.Stats().Tokens)
			}
			t.Logf("gradients = central differences, worst %.1e (tokens %v)", worst, before)
		})
	}
}

// The aux loss is E·Σ f_e·P_e: exactly 1 for a uniform router whatever
// the (tie-broken) selection, and its value on the host equals the
// tensor's.
func TestMoEAuxLoss(t *testing.T) {
	skipNoFloat64(t)
	m, x, _ := moeFixture(t, "gelu", 2, forge.Float64)
	forge.NoGrad(func() { m.Router.Weight.CopyFrom(forge.ZerosOf(forge.Float64, 4, 8)) })
	m.Forward(x)
	if a := m.TakeAux().Item(); math.Abs(a-1) > 1e-12 || math.Abs(m.Stats().Aux-1) > 1e-12 {
		t.Errorf("uniform router: aux %v (host %v), want 1", a, m.Stats().Aux)
	}
	if got := m.Stats().Tokens; !slices.Equal(got, []int{13, 13, 0, 0}) {
		t.Errorf("uniform router, k=2: tokens %v, want ties to the lowest experts [13 13 0 0]", got)
	}
	m2, x2, _ := moeFixture(t, "gelu", 2, forge.Float64)
	m2.Forward(x2)
	if a := m2.TakeAux().Item(); math.Abs(a-m2.Stats().Aux) > 1e-12 || a <= 1 {
		t.Errorf("skewed router: aux %v, host %v: want equal and > 1", a, m2.Stats().Aux)
	}
	if m2.TakeAux() != nil {
		t.Error("TakeAux keeps the aux loss after handing it over")
	}
}

func skipNoFloat64(t *testing.T) {
	if !forge.DefaultDevice().Supports("matmul", forge.Float64) {
		t.Skip("the device has no float64")
	}
}

func TestTopKTies(t *testing.T) {
	p := []float64{0.1, 0.3, 0.3, 0.3, 0.5, 0.2, 0.2, 0.1}
	got := topK(p, 2, 4, 2)
	if want := []int32{1, 2, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("topK = %v, want %v", got, want)
	}
}

// A MoE with one expert and k = 1 is that expert's MLP (gate 1).
func TestMoEOneExpertIsMLP(t *testing.T) {
	in := Init{Gen: forge.NewGenerator(3)}
	m := NewMoE(in, "swiglu", 8, 16, 1, 1, false, 0.3, 0.3)
	x := forge.NewGenerator(4).Randn(forge.Float32, 2, 3, 8)
	got, want := m.Forward(x).Float32s(), m.Experts[0].Forward(x).Float32s()
	if d := maxDiff(got, want); d > 1e-7 {
		t.Errorf("one expert: maxdiff %g from its MLP", d)
	}
}
