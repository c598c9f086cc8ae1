package forgetest

// Checks of Round and the fake quantisers (forge.Quantize, forge.FakeQuant)
// against host references written here in float32 arithmetic with
// math.RoundToEven: Round on ties, signed zeros, large and non-finite
// values, bit for bit; int8 levels, scales and fake-quantised weights bit
// for bit (each step is one correctly rounded operation); ternary against
// the reference fed the device's own scale (the scale is a mean, whose
// summation order is the backend's), and that scale within the bound of
// an n-term float32 sum; and the straight-through gradient.

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
)

// Quant runs the Round and fake-quantisation checks on dev.
func Quant(t *testing.T, dev *forge.Device) {
	t.Run("round", func(t *testing.T) { quantRound(t, dev) })
	t.Run("int8", func(t *testing.T) { quantInt8(t, dev) })
	t.Run("ternary", func(t *testing.T) { quantTernary(t, dev) })
	t.Run("ste", func(t *testing.T) { quantSTE(t, dev) })
}

func quantRound(t *testing.T, dev *forge.Device) {
	negZero := float32(math.Copysign(0, -1))
	in := []float32{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 0.50000006, -0.49999997, 126.5, 127.5,
		-126.5, 0, negZero, -0.3, 1e-30, 8388607.5, 8388609, -8388607.5, 3e9, float32(math.Inf(1)),
		float32(math.Inf(-1)), float32(math.NaN()), 2.4999998, 1.0000001, -7.25}
	got := forge.FromSlice(in, len(in)).To(dev).Round().Float32s()
	for i, x := range in {
		want := float32(math.RoundToEven(float64(x)))
		if !sameFloat32(got[i], want) {
			t.Errorf("round(%v) = %v, want %v (halves to even)", x, got[i], want)
		}
	}
	if xs := forge.FromSlice(in, len(in)).To(dev).RequiresGrad(); xs.Round().RequiresGradFlag() {
		t.Errorf("round records a gradient; it has none")
	}
}

// sameFloat32 is bit equality, with any NaN equal to any NaN.
func sameFloat32(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// quantInput is a (rows, cols) weight of N(0, σ²)-like values with some
// exact ties planted (w = (k+½)·s for the row's own s), a zero row and a
// row whose max is negative.
func quantInput(rows, cols int, seed uint64) []float32 {
	g := forge.NewGenerator(seed)
	w := g.Randn(forge.Float32, rows, cols).MulScalar(0.05).Float32s()
	for j := range cols {
		w[2*cols+j] = 0 // an all-zero row (pruned)
	}
	w[3*cols+1] = -0.4 // the row's absmax is negative
	return w
}

// int8Ref quantises one row on the host in float32.
func int8Ref(row []float32) (levels []float32, s float32) {
	a := float32(0)
	for _, v := range row {
		a = max(a, float32(math.Abs(float64(v))))
	}
	a = max(a, float32(forge.QuantInt8MinAbsMax))
	s = a / 127
	for _, v := range row {
		r := min(max(v/s, -127), 127)
		levels = append(levels, float32(math.RoundToEven(float64(r))))
	}
	return levels, s
}

func quantInt8(t *testing.T, dev *forge.Device) {
	rows, cols := 6, 37
	w := quantInput(rows, cols, 11)
	// Plant ties on row 1: v/s exactly k + ½ for its s.
	_, s1 := int8Ref(w[cols : 2*cols])
	w[cols+3], w[cols+4] = 2.5*s1, -0.5*s1
	if w[cols+3]/s1 != 2.5 {
		t.Fatalf("internal: the planted tie is not exact")
	}
	wt := forge.FromSlice(w, rows, cols).To(dev)
	lv, sc := forge.Quantize(wt, forge.QuantInt8)
	q := forge.FakeQuant(wt, forge.QuantInt8).Float32s()
	if sh := sc.Shape(); len(sh) != 2 || sh[0] != rows || sh[1] != 1 {
		t.Fatalf("int8 scale shape %v, want [%d 1]", sh, rows)
	}
	gl, gs := lv.Float32s(), sc.Float32s()
	bad := 0
	for i := range rows {
		ref, s := int8Ref(w[i*cols : (i+1)*cols])
		if !sameFloat32(gs[i], s) {
			t.Errorf("row %d: scale %v, want %v", i, gs[i], s)
		}
		for j := range cols {
			k := i*cols + j
			if !sameFloat32(gl[k], ref[j]) || !sameFloat32(q[k], ref[j]*s) {
				if bad++; bad <= 5 {
					t.Errorf("w[%d,%d] = %v: level %v q %v, want %v and %v", i, j, w[k], gl[k], q[k], ref[j], ref[j]*s)
				}
			}
		}
	}
	if gl[cols+3] != 2 || gl[cols+4] != 0 {
		t.Errorf("ties: levels %v %v, want 2 and 0 (halves to even)", gl[cols+3], gl[cols+4])
	}
}

func quantTernary(t *testing.T, dev *forge.Device) {
	rows, cols := 7, 45
	w := quantInput(rows, cols, 12)
	wt := forge.FromSlice(w, rows, cols).To(dev)
	lv, sc := forge.Quantize(wt, forge.QuantTernary)
	q := forge.FakeQuant(wt, forge.QuantTernary).Float32s()
	if sc.Dim() != 0 {
		t.Fatalf("ternary scale shape %v, want a 0-d tensor", sc.Shape())
	}
	s := sc.Float32s()[0]
	sum := 0.0
	for _, v := range w {
		sum += math.Abs(float64(v))
	}
	n := float64(len(w))
	want := sum/n + forge.QuantTernaryEps
	// A float32 sum of n non-negative terms is within γₙ·Σ|w| of the exact
	// one (γₙ = n·u/(1−n·u), u = 2⁻²⁴); the mean's product and the eps's
	// addition add one rounding each.
	u := math.Ldexp(1, -24)
	bound := (n*u/(1-n*u))*sum/n + 3*u*want
	if d := math.Abs(float64(s) - want); d > bound {
		t.Errorf("ternary scale %v, want %v within %.2e (off by %.2e)", s, want, bound, d)
	}
	gl := lv.Float32s()
	counts := map[float32]int{}
	bad := 0
	for k, v := range w {
		r := float32(math.RoundToEven(float64(min(max(v/s, -1), 1))))
		counts[gl[k]]++
		if !sameFloat32(gl[k], r) || !sameFloat32(q[k], r*s) {
			if bad++; bad <= 5 {
				t.Errorf("w[%d] = %v: level %v q %v, want %v and %v", k, v, gl[k], q[k], r, r*s)
			}
		}
	}
	if counts[-1] == 0 || counts[0] == 0 || counts[1] == 0 || len(counts) > 3 {
		t.Errorf("ternary levels %v: want some of each of −1, 0, 1 and nothing else", counts)
	}
}

// quantSTE: the gradient reaching w through FakeQuant is the gradient of
// the fake-quantised weight, unchanged (both modes), and the forward is
// exactly Quantize's levels·scale.
func quantSTE(t *testing.T, dev *forge.Device) {
	rows, cols := 5, 9
	w := quantInput(rows, cols, 13)
	up := forge.NewGenerator(14).Randn(forge.Float32, rows, cols).To(dev)
	for _, mode := range []string{forge.QuantInt8, forge.QuantTernary} {
		wt := forge.FromSlice(w, rows, cols).To(dev).RequiresGrad()
		q := forge.FakeQuant(wt, mode)
		q.Mul(up).Sum().Backward()
		g, u := wt.Grad().Float32s(), up.Float32s()
		for k := range g {
			if !sameFloat32(g[k], u[k]) {
				t.Errorf("%s: grad[%d] = %v, want the upstream %v", mode, k, g[k], u[k])
				break
			}
		}
		// Used twice, through the quantiser and directly: the gradients add
		// (the straight-through one is handed on without a copy, so a later
		// contribution must not land in a tensor another gradient shares).
		w2 := forge.FromSlice(w, rows, cols).To(dev).RequiresGrad()
		forge.FakeQuant(w2, mode).Mul(up).Sum().Add(w2.MulScalar(3).Mul(up).Sum()).Backward()
		g2 := w2.Grad().Float32s()
		for k := range g2 {
			if want := u[k] + 3*u[k]; math.Abs(float64(g2[k]-want)) > 1e-6*math.Abs(float64(want)) {
				t.Errorf("%s, two uses: grad[%d] = %v, want %v", mode, k, g2[k], want)
				break
			}
		}
		if forge.FakeQuant(wt, forge.QuantNone) != wt || forge.FakeQuant(wt, "") != wt {
			t.Errorf("FakeQuant(none) is not the weight itself")
		}
	}
}
