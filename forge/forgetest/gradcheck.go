package forgetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
)

// gradCase is one differentiable expression: inputs of the given shapes
// (float64, standard normal unless pos) and a function of them.
type gradCase struct {
	name   string
	shapes [][]int
	pos    []bool // inputs that must be positive (|x|+0.5)
	fn     func(x []*forge.Tensor) *forge.Tensor
}

func ids(dev *forge.Device, v []int32, shape ...int) *forge.Tensor {
	return forge.FromSlice(v, shape...).To(dev)
}

// gradCases lists every differentiable op, often in several shapes.
func gradCases(dev *forge.Device) []gradCase {
	s := func(shapes ...[]int) [][]int { return shapes }
	un := func(name string, f func(x *forge.Tensor) *forge.Tensor, pos bool) gradCase {
		return gradCase{name: "unary/" + name, shapes: s([]int{3, 5}), pos: []bool{pos},
			fn: func(x []*forge.Tensor) *forge.Tensor { return f(x[0]) }}
	}
	bin := func(name string, a, b []int, f func(a, b *forge.Tensor) *forge.Tensor, pos bool) gradCase {
		return gradCase{name: "binary/" + name, shapes: s(a, b), pos: []bool{pos, false},
			fn: func(x []*forge.Tensor) *forge.Tensor { return f(x[0], x[1]) }}
	}
	// mask is a (3, 5) condition in dt, the dtype of the case's inputs
	// (float32 on devices without float64).
	mask := func(dt forge.DType) *forge.Tensor {
		v := []float64{1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0}
		if dt == forge.Float32 {
			f := make([]float32, len(v))
			for i, x := range v {
				f[i] = float32(x)
			}
			return forge.FromSlice(f, 3, 5).To(dev)
		}
		return forge.FromSlice(v, 3, 5).To(dev)
	}
	return []gradCase{
		un("neg", (*forge.Tensor).Neg, false),
		un("exp", (*forge.Tensor).Exp, false),
		un("log", (*forge.Tensor).Log, true),
		un("sqrt", (*forge.Tensor).Sqrt, true),
		un("rsqrt", (*forge.Tensor).Rsqrt, true),
		un("tanh", (*forge.Tensor).Tanh, false),
		un("sigmoid", (*forge.Tensor).Sigmoid, false),
		un("silu", (*forge.Tensor).SiLU, false),
		un("softplus", (*forge.Tensor).Softplus, false),
		un("gelu_tanh", (*forge.Tensor).GELU, false),
		un("gelu_erf", (*forge.Tensor).GELUExact, false),
		un("relu", (*forge.Tensor).ReLU, false),
		un("abs", (*forge.Tensor).Abs, false),
		un("square", (*forge.Tensor).Square, false),
		un("pow_scalar", func(x *forge.Tensor) *forge.Tensor { return x.PowScalar(2.5) }, true),
		un("clamp", func(x *forge.Tensor) *forge.Tensor { return x.Clamp(-0.7, 0.4) }, false),
		un("add_scalar", func(x *forge.Tensor) *forge.Tensor { return x.AddScalar(1.5) }, false),
		un("sub_scalar", func(x *forge.Tensor) *forge.Tensor { return x.SubScalar(1.5) }, false),
		un("mul_scalar", func(x *forge.Tensor) *forge.Tensor { return x.MulScalar(-3) }, false),
		un("div_scalar", func(x *forge.Tensor) *forge.Tensor { return x.DivScalar(4) }, false),
		un("rsub_scalar", func(x *forge.Tensor) *forge.Tensor { return x.RSubScalar(2) }, false),
		un("rdiv_scalar", func(x *forge.Tensor) *forge.Tensor { return x.RDivScalar(2) }, true),
		un("rpow_scalar", func(x *forge.Tensor) *forge.Tensor { return x.RPowScalar(1.7) }, false),
		bin("add_bcast", []int{3, 4}, []int{4}, (*forge.Tensor).Add, false),
		bin("sub_bcast", []int{2, 1, 5}, []int{3, 1}, (*forge.Tensor).Sub, false),
		bin("mul_bcast", []int{2, 3, 1}, []int{1, 4}, (*forge.Tensor).Mul, false),
		bin("div", []int{3, 4}, []int{3, 4}, func(a, b *forge.Tensor) *forge.Tensor { return a.Div(b.Abs().AddScalar(0.5)) }, false),
		bin("pow", []int{3, 4}, []int{4}, (*forge.Tensor).Pow, true),
		bin("maximum", []int{3, 4}, []int{3, 4}, (*forge.Tensor).Maximum, false),
		bin("minimum", []int{3, 4}, []int{1, 4}, (*forge.Tensor).Minimum, false),
		bin("scalar_tensor", []int{3, 4}, []int{}, (*forge.Tensor).Mul, false),
		{name: "binary/self_mul", shapes: s([]int{3, 4}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Mul(x[0]).Add(x[0]) }},
		{name: "where", shapes: s([]int{3, 5}, []int{5}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Where(mask(x[0].DType()), x[0], x[1])
		}},
		{name: "masked_fill", shapes: s([]int{3, 5}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].MaskedFill(mask(x[0].DType()), -2)
		}},
		{name: "reduce/sum_all", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Sum() }},
		{name: "reduce/sum_axes", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Sum(0, 2) }},
		{name: "reduce/sum_keep", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].SumKeep(1) }},
		{name: "reduce/mean", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Mean(-1) }},
		{name: "reduce/var", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Var(0, 1) }},
		{name: "reduce/max", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Max(1) }},
		{name: "reduce/min_keep", shapes: s([]int{3, 4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].MinKeep(2) }},
		{name: "matmul/2d", shapes: s([]int{3, 4}, []int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].MatMul(x[1]) }},
		{name: "matmul/nt", shapes: s([]int{3, 4}, []int{5, 4}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].MatMul(x[1].T()) }},
		{name: "matmul/tn", shapes: s([]int{4, 3}, []int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].T().MatMul(x[1]) }},
		{name: "matmul/batched_bcast", shapes: s([]int{2, 1, 3, 4}, []int{3, 4, 2}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].MatMul(x[1]) }},
		{name: "matmul/batched_x_2d", shapes: s([]int{2, 3, 4}, []int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].MatMul(x[1]) }},
		{name: "matmul/permuted_batch", shapes: s([]int{3, 2, 4}, []int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].Permute(1, 0, 2).MatMul(x[1])
		}},
		{name: "move/reshape_permute", shapes: s([]int{2, 3, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].Permute(2, 0, 1).Reshape(4, 6).Tanh()
		}},
		{name: "move/narrow_slice_index", shapes: s([]int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].Narrow(1, 1, 3).Slice(0, -3, 10).Index(1, 0).Exp()
		}},
		// Gradients of several windows of one tensor accumulate into one
		// buffer (the ones below exercise the windows still unwritten:
		// disjoint, nested, overlapping, partial, and the whole tensor
		// used too), also through a permuted view.
		{name: "move/narrow_windows", shapes: s([]int{3, 7}), fn: func(x []*forge.Tensor) *forge.Tensor {
			a := x[0].Narrow(1, 0, 2).Exp()
			b := x[0].Narrow(1, 4, 2).Square()
			c := x[0].Narrow(1, 1, 4).Tanh() // overlaps both
			d := x[0].Narrow(1, 5, 1).Mul(x[0].Narrow(1, 6, 1))
			return forge.Concat(1, a, b, c, d)
		}},
		{name: "move/narrow_windows_and_whole", shapes: s([]int{4, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			p := x[0].Permute(1, 0) // (3, 4) view
			return forge.Concat(0, p.Index(0, 2).Exp(), p.Index(0, 0).Square(), x[0].Sum(1).Tanh())
		}},
		{name: "move/narrow_window_unused_rest", shapes: s([]int{2, 5, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			all := x[0].Permute(2, 0, 1)
			return all.Index(0, 1).Exp().Add(all.Index(0, 1).Square())
		}},
		{name: "move/expand", shapes: s([]int{3, 1}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Expand(2, 3, 4).Tanh() }},
		{name: "move/concat_stack", shapes: s([]int{2, 3}, []int{1, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			c := forge.Concat(0, x[0], x[1], x[0])
			return forge.Stack(1, c, c.Square())
		}},
		{name: "move/split_chunk", shapes: s([]int{6, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			p := x[0].Split(0, 1, 2, 3)
			q := x[0].Chunk(2, 1)
			return p[2].Sum(0).Mul(q[1].Sum(1).Sum().Reshape(1)).Add(p[0].Reshape(4))
		}},
		{name: "move/index_select", shapes: s([]int{4, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].IndexSelect(0, ids(dev, []int32{3, 0, 3, 1}, 4))
		}},
		{name: "move/index_add", shapes: s([]int{4, 3}, []int{5, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].IndexAdd(0, ids(dev, []int32{3, 0, 3, 1, 3}, 5), x[1]).Tanh()
		}},
		{name: "move/gather", shapes: s([]int{3, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return x[0].Gather(1, ids(dev, []int32{0, 3, 3, 1, 2, 2, 0, 0, 1}, 3, 3))
		}},
		{name: "nn/softmax_last", shapes: s([]int{3, 7}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Softmax(-1) }},
		{name: "nn/softmax_middle", shapes: s([]int{2, 5, 3}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].Softmax(1) }},
		{name: "nn/log_softmax", shapes: s([]int{4, 6}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].LogSoftmax(-1) }},
		{name: "nn/layer_norm", shapes: s([]int{2, 3, 8}, []int{8}, []int{8}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.LayerNorm(x[0], x[1], x[2], 1e-5)
		}},
		{name: "nn/layer_norm_plain", shapes: s([]int{4, 5}), fn: func(x []*forge.Tensor) *forge.Tensor { return forge.LayerNorm(x[0], nil, nil, 1e-5) }},
		{name: "nn/swiglu", shapes: s([]int{3, 7}, []int{3, 7}), fn: func(x []*forge.Tensor) *forge.Tensor { return forge.SwiGLU(x[0], x[1]) }},
		{name: "nn/swiglu_of_views", shapes: s([]int{4, 3}, []int{3, 4}), fn: func(x []*forge.Tensor) *forge.Tensor { return forge.SwiGLU(x[0].T(), x[1]) }},
		{name: "reduce/sum_squares", shapes: s([]int{3, 4}), fn: func(x []*forge.Tensor) *forge.Tensor { return x[0].T().SumSquares() }},
		{name: "nn/rms_norm", shapes: s([]int{2, 3, 8}, []int{8}), fn: func(x []*forge.Tensor) *forge.Tensor { return forge.RMSNorm(x[0], x[1], 1e-6) }},
		{name: "nn/embedding", shapes: s([]int{5, 3}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Embedding(ids(dev, []int32{4, 0, 4, 2, 1, 4}, 2, 3), x[0])
		}},
		{name: "nn/rope", shapes: s([]int{2, 2, 5, 6}), fn: func(x []*forge.Tensor) *forge.Tensor { return forge.RoPE(x[0], 3) }},
		{name: "nn/rope_of_qkv", shapes: s([]int{2, 5, 3, 2, 6}), fn: func(x []*forge.Tensor) *forge.Tensor {
			// q and k of a fused (B, T, 3, H, D) projection, permuted to
			// (B, H, T, D): strided views with contiguous rows.
			all := x[0].Permute(2, 0, 3, 1, 4)
			return forge.Concat(0, forge.RoPE(all.Index(0, 0), 3), forge.RoPE(all.Index(0, 1), 0), all.Index(0, 2))
		}},
		{name: "nn/attention_causal_gqa", shapes: s([]int{1, 4, 5, 8}, []int{1, 2, 5, 8}, []int{1, 2, 5, 8}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Attention(x[0], x[1], x[2], true)
		}},
		{name: "nn/attention_of_qkv", shapes: s([]int{2, 5, 3, 2, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			// q, k, v as heads of a fused (B, T, 3, H, D) projection, the
			// output consumed as (B, T, H·D), as in a transformer block.
			all := x[0].Permute(2, 0, 3, 1, 4)
			y := forge.Attention(forge.RoPE(all.Index(0, 0), 0), all.Index(0, 1), all.Index(0, 2), true)
			return y.Transpose(1, 2).Reshape(2, 5, 8).Tanh()
		}},
		{name: "nn/attention_full", shapes: s([]int{2, 2, 3, 4}, []int{2, 2, 6, 4}, []int{2, 2, 6, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Attention(x[0], x[1], x[2], false)
		}},
		{name: "nn/attention_decode", shapes: s([]int{1, 2, 2, 4}, []int{1, 1, 6, 4}, []int{1, 1, 6, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Attention(x[0], x[1], x[2], true)
		}},
		{name: "nn/cross_entropy_ignore", shapes: s([]int{2, 3, 7}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.CrossEntropy(x[0], ids(dev, []int32{6, -100, 0, 3, 3, -100}, 2, 3), -100)
		}},
		{name: "nn/dropout", shapes: s([]int{4, 6}), fn: func(x []*forge.Tensor) *forge.Tensor {
			return forge.Dropout(x[0], 0.3, forge.NewGenerator(7))
		}},
		{name: "graph/two_paths", shapes: s([]int{3, 4}, []int{4, 4}), fn: func(x []*forge.Tensor) *forge.Tensor {
			h := x[0].MatMul(x[1])
			return h.Tanh().Add(h.Sigmoid().Mul(x[0])).Sum(1)
		}},
	}
}

// GradCheck compares every op's gradient with float64 central differences
// on dev.
//
// On a device that holds float64 tensors (propHasFloat64) the analytic
// gradient is float64 too and must match to 1e-6. On a device without
// float64 (Metal) the analytic gradient is computed in float32 on dev, at
// inputs rounded to float32, and the central differences in float64 on
// the cpu device at the same (rounded) inputs: it must match to
// gradTol32, a float32 tolerance.
func GradCheck(t *testing.T, dev *forge.Device) {
	f64 := propHasFloat64(dev)
	var ref *forge.Device
	if !f64 {
		var err error
		if ref, err = forge.OpenDevice("cpu"); err != nil {
			t.Fatalf("device %s holds no float64 tensors and the cpu device for the float64 differences does not open: %v", dev.Name(), err)
		}
		t.Logf("device %s holds no float64 tensors: analytic gradients in float32 on %s, "+
			"central differences in float64 on cpu at the same float32 inputs, tolerance %.0e", dev.Name(), dev.Name(), gradTol32)
	}
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	cases := gradCases(dev)
	var refCases []gradCase
	if ref != nil {
		refCases = gradCases(ref)
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if f64 {
				err = forge.Try(func() { checkCase(t, dev, c) })
			} else {
				err = forge.Try(func() { _ = checkCase32(t, dev, ref, c, refCases[i]) })
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// gradTol32 bounds |analytic − numeric| / max(1, |numeric|) for float32
// analytic gradients: TorchParity's float32 tolerance. The inputs are O(1)
// and every case chains a few ops, each within a few float32 ulps (6e-8):
// measured worst cases are 2.4e-7 (the cpu backend in float32) and 2.1e-7
// (metal-emu), while a wrong rule gives an O(1) error.
const gradTol32 = 1e-5

// checkCase32 is checkCase for a device without float64: the analytic
// gradient of Σ fn(x)·R in float32 on dev, the central differences of the
// same function in float64 on ref (the cpu device), at inputs and R
// rounded to float32 so that both see the same point. It returns the
// worst normalised difference.
func checkCase32(t testing.TB, dev, ref *forge.Device, c, rc gradCase) float64 {
	gen := forge.NewGenerator(uint64(len(c.name))*7919 + 1)
	xs := make([]*forge.Tensor, len(c.shapes))
	host := make([][]float64, len(c.shapes))
	for i, sh := range c.shapes {
		v32 := gen.Randn(forge.Float32, sh...).Float32s()
		v := make([]float64, len(v32))
		for j, x := range v32 {
			v[j] = float64(x)
			if i < len(c.pos) && c.pos[i] {
				v[j] = float64(float32(math.Abs(v[j]) + 0.5))
			}
			v32[j] = float32(v[j])
		}
		host[i] = v
		xs[i] = forge.FromSlice(v32, sh...).To(dev).RequiresGrad()
	}
	out := c.fn(xs)
	r32 := gen.Randn(forge.Float32, out.Shape()...)
	r := r32.To(ref).Cast(forge.Float64)
	loss := out.Mul(r32.To(dev)).Sum()
	loss.Backward()

	eval := func(vals [][]float64) float64 {
		var f float64
		forge.NoGrad(func() {
			forge.SetDefaultDevice(ref)
			defer forge.SetDefaultDevice(dev)
			in := make([]*forge.Tensor, len(vals))
			for i := range vals {
				in[i] = forge.FromSlice(vals[i], c.shapes[i]...).To(ref)
			}
			f = rc.fn(in).Mul(r).Sum().Item()
		})
		return f
	}
	worst := compareCentral(t, xs, c.shapes, host, eval, gradTol32, "analytic (float32)")
	t.Logf("%s maxdiff %.2e (float32 analytic)", fmt.Sprint(c.shapes), worst)
	return worst
}

// checkCase compares the analytic gradient of Σ fn(x)·R with central
// differences, element by element (at most 24 elements per input).
func checkCase(t *testing.T, dev *forge.Device, c gradCase) {
	gen := forge.NewGenerator(uint64(len(c.name))*7919 + 1)
	xs := make([]*forge.Tensor, len(c.shapes))
	host := make([][]float64, len(c.shapes))
	for i, sh := range c.shapes {
		v := gen.Randn(forge.Float64, sh...).Float64s()
		if i < len(c.pos) && c.pos[i] {
			for j := range v {
				v[j] = math.Abs(v[j]) + 0.5
			}
		}
		host[i] = v
		xs[i] = forge.FromSlice(v, sh...).To(dev).RequiresGrad()
	}
	out := c.fn(xs)
	r := gen.Randn(forge.Float64, out.Shape()...).To(dev)
	loss := out.Mul(r).Sum()
	loss.Backward()

	eval := func(vals [][]float64) float64 {
		var f float64
		forge.NoGrad(func() {
			in := make([]*forge.Tensor, len(vals))
			for i := range vals {
				in[i] = forge.FromSlice(vals[i], c.shapes[i]...).To(dev)
			}
			f = c.fn(in).Mul(r).Sum().Item()
		})
		return f
	}
	worst := compareCentral(t, xs, c.shapes, host, eval, 1e-6, "analytic")
	t.Logf("%s maxdiff %.2e", fmt.Sprint(c.shapes), worst)
}

// compareCentral compares each input's analytic gradient (xs[i].Grad(),
// widened to float64) with central differences of eval around host, at
// most 24 elements per input, each within tol·max(1, |numeric|), and
// returns the worst relative difference.
func compareCentral(t testing.TB, xs []*forge.Tensor, shapes [][]int, host [][]float64, eval func([][]float64) float64, tol float64, analytic string) float64 {
	t.Helper()
	const h = 1e-6
	worst := 0.0
	for i := range xs {
		g := xs[i].Grad()
		if g == nil {
			t.Fatalf("input %d %v: no gradient", i, shapes[i])
		}
		ga := g.Float64s()
		step := max(1, len(host[i])/24)
		for j := 0; j < len(host[i]); j += step {
			orig := host[i][j]
			host[i][j] = orig + h
			fp := eval(host)
			host[i][j] = orig - h
			fm := eval(host)
			host[i][j] = orig
			num := (fp - fm) / (2 * h)
			diff := math.Abs(num - ga[j])
			worst = math.Max(worst, diff/math.Max(1, math.Abs(num)))
			if diff > tol*math.Max(1, math.Abs(num)) {
				t.Errorf("input %d %v element %d: %s %.10g, numeric %.10g (diff %.3g)", i, shapes[i], j, analytic, ga[j], num, diff)
			}
		}
	}
	return worst
}
