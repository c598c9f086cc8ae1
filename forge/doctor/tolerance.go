package doctor

// Tolerances of shadow parity: how far one kernel's output may differ
// between the device and the CPU when both computed it in float32 from the
// same inputs (shadow parity copies the device's outputs into the CPU's
// tensors after each kernel, so every kernel on the CPU starts from
// exactly the device's inputs, and a difference is that kernel's own
// rounding, never an earlier kernel's carried forward).
//
// With u = 2⁻²⁴ (float32's unit roundoff) and γₙ = n·u/(1−n·u), each side
// is within its forward error bound of the exact result, so the two are
// within twice it:
//
//	matmul, depth k:   |Δᵢⱼ| ≤ 2·γₖ₊₁·(2·(|A|·|B|)ᵢⱼ + |Cᵢⱼ|)     element by element
//	                   (|A|·|B| computed on the host in float64; the |C| and the
//	                   extra term cover an accumulating product, out += A·B)
//	every other kernel: max|Δ| ≤ 2·(γₙ + m·u)·M                  over each output
//
// where n is the kernel's accumulation depth, m the ulps its functions may
// lose (the MSL specification's precise-math bounds are ≤ 4 ulp for exp,
// log, rsqrt and the trigonometric functions; composite kernels chain a
// few: m = 16), and M the magnitude the error is relative to:
//
//	exact (n = m = 0): copy, fill, index_select, gather, where, reduce.max/min
//	  — they move values or pick one, with no rounding.
//	elementwise (n = 0): unary.*, unary_grad.*, binary.*, swiglu, softplus,
//	  adamw, adamw_clipped: M = the output's largest magnitude (each element is
//	  within m ulps of its own value).
//	rope: n = T (the angle pos·θ is rounded with error ~pos·u, at most T·u).
//	sums (reduce.sum, reduce.mean, sum_squares, index_add, scatter_add,
//	  softmax.backward): n = terms per output, M = n·Π max|input| (the sum of
//	  the terms' magnitudes, which cancellation can make far larger than the
//	  result).
//	row kernels (softmax, rms_norm, layer_norm, cross_entropy, attention,
//	  grad_clip): n = the row's length (attention: Tk + D + the query rows
//	  per key head, which the backward sums over; the norms' backward also
//	  sums dw over the rows), M = max|out| for the forward passes, which are
//	  normalised (no cancellation), and n·max|out| for the backward passes,
//	  whose projections (dx = r·(g·w − x·mean(g·w·x)·r²) and its kin) have
//	  terms that can exceed the result. That is loose: the backward rows
//	  catch an error of about 1e-2 of the output's largest magnitude (the
//	  tests plant 1e-3 in a forward norm and a matmul element, 1e-4 in the
//	  optimizer's update, and see each named).
//
// A kernel not in the table gets n = its first input's largest dimension
// and the row rule. The bounds are worst cases: the report prints each
// kernel's largest |Δ|/tolerance, so the margin shows.

import (
	"math"
	"strings"
)

// u is float32's unit roundoff.
const u = 0x1p-24

func gamma(n int) float64 {
	nu := float64(n) * u
	return nu / (1 - nu)
}

// operand is a tensor's values on the host.
type operand struct {
	shape []int
	v     []float64
	float bool
}

func (o operand) maxAbs() float64 {
	m := 0.0
	for _, x := range o.v {
		if a := math.Abs(x); a > m {
			m = a
		}
	}
	return m
}

func (o operand) lastDim() int {
	if len(o.shape) == 0 {
		return 1
	}
	return o.shape[len(o.shape)-1]
}

func (o operand) dim(i int) int {
	if i < 0 {
		i += len(o.shape)
	}
	if i < 0 || i >= len(o.shape) {
		return 1
	}
	return o.shape[i]
}

// tolerances returns, for output j of kernel, the tolerance of each
// element (matmul) or one tolerance for all (len 1), and the rule's name.
func tolerances(kernel string, in []operand, out []operand, j int) ([]float64, string) {
	o := out[j]
	mo := o.maxAbs()
	first := operand{}
	if len(in) > 0 {
		first = in[0]
	}
	prodMax := 1.0
	for _, x := range in {
		if x.float {
			prodMax *= x.maxAbs()
		}
	}
	one := func(n int, m float64, mag float64) []float64 {
		return []float64{2 * (gamma(n) + m*u) * mag}
	}
	name, _, _ := strings.Cut(kernel, ".")
	switch {
	case kernel == "matmul":
		return matmulTolerance(in, out, j), "matmul"
	case kernel == "copy" || kernel == "fill" || kernel == "index_select" || kernel == "gather" ||
		kernel == "where" || kernel == "reduce.max" || kernel == "reduce.min":
		return []float64{0}, "exact"
	case kernel == "rope" || kernel == "rope.backward":
		return one(first.dim(-2), 16, mo), "rope"
	case name == "unary" || name == "unary_grad" || name == "binary" || name == "swiglu" ||
		name == "softplus" || name == "adamw" || name == "adamw_clipped":
		return one(0, 16, mo), "elementwise"
	case kernel == "reduce.sum" || kernel == "reduce.mean":
		n := max(1, numel(first.shape)/max(1, numel(o.shape)))
		mag := float64(n) * first.maxAbs()
		if kernel == "reduce.mean" {
			mag /= float64(n)
		}
		return one(n, 2, math.Max(mo, mag)), "sum"
	case kernel == "sum_squares":
		n := numel(first.shape)
		return one(n, 2, math.Max(mo, float64(n)*first.maxAbs()*first.maxAbs())), "sum"
	case kernel == "index_add" || kernel == "scatter_add":
		n := max(1, numel(first.shape)/max(1, first.lastDim()))
		return one(n, 1, math.Max(mo, float64(n)*first.maxAbs())), "sum"
	case kernel == "softmax.backward" || kernel == "log_softmax.backward":
		n := first.lastDim()
		return one(n, 16, math.Max(mo, float64(n)*prodMax)), "sum"
	case kernel == "attention" || kernel == "attention.backward":
		q := first
		k := first
		if len(in) > 1 {
			k = in[1]
		}
		groups := max(1, q.dim(1)/max(1, k.dim(1)))
		n := groups*q.dim(-2) + k.dim(-2) + q.dim(-1)
		return one(n, 16, rowMagnitude(kernel, n, mo)), "row"
	case name == "rms_norm" || name == "layer_norm":
		c := first.lastDim()
		n := max(c, numel(first.shape)/max(1, c)) // dw sums over the rows
		return one(n, 16, rowMagnitude(kernel, n, mo)), "row"
	case name == "softmax" || name == "log_softmax" || name == "cross_entropy" || kernel == "grad_clip":
		n := max(1, first.lastDim())
		return one(n, 16, rowMagnitude(kernel, n, mo)), "row"
	}
	n := 1
	for _, d := range first.shape {
		n = max(n, d)
	}
	return one(n, 16, float64(n)*mo), "row (default)"
}

// rowMagnitude is M of a row kernel: the output's largest magnitude for
// a forward pass (normalised: no cancellation), n times it for a backward
// pass (its projections cancel).
func rowMagnitude(kernel string, n int, maxOut float64) float64 {
	if strings.HasSuffix(kernel, ".backward") {
		return float64(n) * maxOut
	}
	return maxOut
}

// matmulTolerance is the element-by-element bound of a product: output j
// of a matmul kernel is in[2j] @ in[2j+1] (a pair launch has two).
func matmulTolerance(in, out []operand, j int) []float64 {
	a, b, c := in[min(2*j, len(in)-2)], in[min(2*j+1, len(in)-1)], out[j]
	m, k, n := a.dim(-2), a.dim(-1), b.dim(-1)
	batches := numel(c.shape) / max(1, m*n)
	// Operands broadcast to the output's batch: a batch of a or b of size 1
	// serves every output batch.
	aBatches, bBatches := numel(a.shape)/max(1, m*k), numel(b.shape)/max(1, k*n)
	g := 2 * gamma(k+1)
	tol := make([]float64, len(c.v))
	for t := range batches {
		ao, bo := (t%max(1, aBatches))*m*k, (t%max(1, bBatches))*k*n
		for i := range m {
			for jj := range n {
				s := 0.0
				for p := range k {
					s += math.Abs(a.v[ao+i*k+p]) * math.Abs(b.v[bo+p*n+jj])
				}
				idx := t*m*n + i*n + jj
				tol[idx] = g * (2*s + math.Abs(c.v[idx]))
			}
		}
	}
	return tol
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
