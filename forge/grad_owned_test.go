package forge

import (
	"math"
	"testing"
)

// TestOwnedGradients: the gradients Backward hands to leaves without a copy
// (a linear layer's weight through W.T(), the matmul's products) are
// unshared and correct, and later Backward calls accumulate into them,
// also when one weight is used twice and when a gradient reaches two
// leaves.
func TestOwnedGradients(t *testing.T) {
	g := NewGenerator(3)
	x := g.Randn(Float32, 6, 4).RequiresGrad()
	w := g.Randn(Float32, 5, 4).RequiresGrad()
	u := g.Randn(Float32, 5, 3).RequiresGrad()
	loss := func() *Tensor {
		h := x.MatMul(w.T())                  // (6, 5), W transposed
		k := x.MatMul(w.T()).Mul(h)           // w used twice
		return h.MatMul(u).Sum().Add(k.Sum()) // u plain
	}
	// The reference: the same graph through copies (no owned gradients).
	ref := func() (gx, gw, gu []float32) {
		xr := x.Detach().Clone().RequiresGrad()
		wr := w.Detach().Clone().RequiresGrad()
		ur := u.Detach().Clone().RequiresGrad()
		wt := wr.T().Contiguous()
		h := xr.Mul(OnesLike(xr)).MatMul(wt)
		k := xr.Mul(OnesLike(xr)).MatMul(wt).Mul(h)
		h.MatMul(ur.Mul(OnesLike(ur))).Sum().Add(k.Sum()).Backward()
		return xr.Grad().Float32s(), wr.Grad().Float32s(), ur.Grad().Float32s()
	}
	gx, gw, gu := ref()
	close := func(name string, got []float32, want []float32, times float32) {
		t.Helper()
		for i := range want {
			if math.Abs(float64(got[i]-times*want[i])) > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, got[i], times*want[i])
			}
		}
	}
	loss().Backward()
	close("x", x.Grad().Float32s(), gx, 1)
	close("w", w.Grad().Float32s(), gw, 1)
	close("u", u.Grad().Float32s(), gu, 1)
	if !w.Grad().IsContiguous() || !u.Grad().IsContiguous() {
		t.Fatal("leaf gradients must be contiguous")
	}
	loss().Backward() // accumulates in place
	close("x", x.Grad().Float32s(), gx, 2)
	close("w", w.Grad().Float32s(), gw, 2)
	close("u", u.Grad().Float32s(), gu, 2)
	// Scaling one gradient in place leaves the others alone.
	NoGrad(func() { w.Grad().MulScalarInPlace(0) })
	close("x", x.Grad().Float32s(), gx, 2)
	close("u", u.Grad().Float32s(), gu, 2)
}
