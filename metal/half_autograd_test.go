package metal

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestHalfAutograd runs a small product through forge's autograd with the
// matmul and tanh in float16 or bfloat16 on the device (float32
// accumulation inside the matmul), the sum in float32, and compares the
// loss and the float32 master weight's gradient with the all-float32
// computation on the CPU. The tolerances are a few roundings of each
// format: 2⁻¹¹ (float16) and 2⁻⁸ (bfloat16) relative per rounded value,
// accumulated over the forward (inputs, weights, product, tanh) and the
// backward (the same again).
func TestHalfAutograd(t *testing.T) {
	dev := openTestDevice(t)
	g := forge.NewGenerator(1)
	a := g.Randn(forge.Float32, 33, 20)
	w := g.Randn(forge.Float32, 20, 17).MulScalar(0.3).RequiresGrad()
	ref := a.MatMul(w).Tanh().Sum()
	ref.Backward()
	wantLoss, wantGrad := ref.Item(), w.Grad().Float64s()
	maxG := 0.0
	for _, v := range wantGrad {
		maxG = math.Max(maxG, math.Abs(v))
	}
	for _, tc := range []struct {
		dt  forge.DType
		eps float64 // unit roundoff of the format
	}{{forge.Float16, 0x1p-11}, {forge.BFloat16, 0x1p-8}} {
		master := w.Detach().To(dev).RequiresGrad() // float32 master weight
		y := a.To(dev).Cast(tc.dt).MatMul(master.Cast(tc.dt)).Tanh().Cast(forge.Float32).Sum()
		y.Backward()
		if gd := master.Grad(); gd.DType() != forge.Float32 {
			t.Fatalf("%v: master gradient is %v, want float32", tc.dt, gd.DType())
		}
		loss := y.Item()
		// The 561 tanh outputs each carry a few roundings of relative size
		// eps; with random signs they add up to about eps·√561 (measured:
		// 0.10 of the bound below for float16, 0.23 for bfloat16).
		if d := math.Abs(loss - wantLoss); d > 3*tc.eps*math.Sqrt(561) {
			t.Errorf("%v: loss %v, float32 %v (|Δ| %.3g)", tc.dt, loss, wantLoss, d)
		}
		got := master.Grad().Float64s()
		worst := 0.0
		for i := range got {
			worst = math.Max(worst, math.Abs(got[i]-wantGrad[i])/maxG)
		}
		// A gradient element sums 33 terms of a few roundings each
		// (measured: 0.08 of the bound for float16, 0.09 for bfloat16).
		if worst > 3*tc.eps*math.Sqrt(33) {
			t.Errorf("%v: gradient differs from float32 by %.3g of its largest element", tc.dt, worst)
		}
		t.Logf("%v: loss %.6g (float32 %.6g), gradient within %.2g of its largest element", tc.dt, loss, wantLoss, worst)
	}
}

// TestHalfSumSquares: sums of squares of 16-bit tensors (forge.SumSquaresOf,
// Tensor.SumSquares with its gradient, the clip's norm) are float32, within
// a float32 rounding of the float64 sum of the widened values.
func TestHalfSumSquares(t *testing.T) {
	dev := openTestDevice(t)
	g := forge.NewGenerator(3)
	x32 := g.Randn(forge.Float32, 1000)
	for _, dt := range []forge.DType{forge.Float16, forge.BFloat16} {
		x := x32.To(dev).Cast(dt)
		want := 0.0
		for _, v := range x.Float64s() {
			want += v * v
		}
		got := forge.SumSquaresOf([]*forge.Tensor{x})[0]
		if math.Abs(got-want) > 1e-6*want {
			t.Errorf("%v: SumSquaresOf %v, float64 %v", dt, got, want)
		}
		p := x.Detach().RequiresGrad()
		s := p.SumSquares()
		if s.DType() != forge.Float32 || math.Abs(s.Item()-want) > 1e-6*want {
			t.Errorf("%v: SumSquares %v %v, float64 %v", dt, s.DType(), s.Item(), want)
		}
		s.Backward()
		if gr := p.Grad(); gr.DType() != dt || math.Abs(gr.Float64s()[7]-2*x.Float64s()[7]) > 1e-2*math.Abs(x.Float64s()[7]) {
			t.Errorf("%v: gradient %v, want 2x", dt, gr.DType())
		}
		c := forge.NewGradClip([]*forge.Tensor{x}, 1)
		if n := c.Norm(); math.Abs(n-math.Sqrt(want)) > 1e-6*math.Sqrt(want) {
			t.Errorf("%v: clip norm %v, want %v", dt, n, math.Sqrt(want))
		}
	}
}
