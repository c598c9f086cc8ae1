package forge

import (
	"slices"
	"testing"
)

// MatMulPair must give the values and gradients of two MatMul calls, bit
// for bit, for linear-layer shaped operands (x @ W.T()) and plain ones.
func TestMatMulPairEqualsTwoMatMuls(t *testing.T) {
	for _, tc := range []struct {
		name      string
		transpose bool
	}{{"x@W.T()", true}, {"x@W", false}} {
		run := func(pair bool) (outs, grads [][]float32) {
			g := NewGenerator(3)
			x := g.Randn(Float32, 4, 33, 24).RequiresGrad()
			w1 := g.Randn(Float32, 40, 24).RequiresGrad()
			w2 := g.Randn(Float32, 56, 24).RequiresGrad()
			u1, u2 := w1.T(), w2.T()
			if !tc.transpose {
				w1, w2 = g.Randn(Float32, 24, 40).RequiresGrad(), g.Randn(Float32, 24, 56).RequiresGrad()
				u1, u2 = w1, w2
			}
			var a, b *Tensor
			if pair {
				a, b = MatMulPair(x, u1, x, u2)
			} else {
				a, b = x.MatMul(u1), x.MatMul(u2)
			}
			a.Tanh().Sum().Add(b.Square().Mean()).Backward()
			return [][]float32{a.Float32s(), b.Float32s()}, [][]float32{x.Grad().Float32s(), w1.Grad().Float32s(), w2.Grad().Float32s()}
		}
		o1, g1 := run(false)
		o2, g2 := run(true)
		for i := range o1 {
			if !slices.Equal(o1[i], o2[i]) {
				t.Errorf("%s: output %d differs", tc.name, i)
			}
		}
		for i := range g1 {
			if !slices.Equal(g1[i], g2[i]) {
				t.Errorf("%s: gradient %d differs", tc.name, i)
			}
		}
	}
	// Unpairable operands fall back to MatMul.
	a, b := MatMulPair(Ones(3, 3, 4), Ones(3, 4, 5), Ones(2, 4), Ones(4, 1))
	if !slices.Equal(a.Shape(), []int{3, 3, 5}) || !slices.Equal(b.Shape(), []int{2, 1}) {
		t.Errorf("fallback shapes %v %v", a.Shape(), b.Shape())
	}
}
