package forge

import (
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/half"
)

// TestHalfCast checks Cast to and from Float16 and BFloat16 against
// forge/half, the readers (Data, Float32s, Float64s, Item), printing, and
// that Cast's gradient casts back.
func TestHalfCast(t *testing.T) {
	src := []float32{0, 1, -2.5, 1.0 / 3, 65504, 70000, 1e-6, 1e-9, float32(math.Inf(-1)), float32(math.NaN()), 1 + 0x1p-11, 1 + 3*0x1p-11}
	x := FromSlice(src, 3, 4)
	for _, c := range []struct {
		dt     DType
		bits   func(float32) uint16
		widen  func(uint16) float32
		prints string
	}{
		{Float16, half.Float16Bits, half.Float16FromBits, "dtype=float16"},
		{BFloat16, half.BFloat16Bits, half.BFloat16FromBits, "dtype=bfloat16"},
	} {
		h := x.Cast(c.dt)
		if h.DType() != c.dt || h.dtype.Size() != 2 {
			t.Fatalf("Cast(%v) gave %v", c.dt, h.DType())
		}
		bits := h.Data().([]uint16)
		f32 := h.Float32s()
		f64 := h.Float64s()
		back := h.Cast(Float32).Float32s()
		for i, v := range src {
			want := c.widen(c.bits(v))
			same := func(g float32) bool {
				return g == want && math.Signbit(float64(g)) == math.Signbit(float64(want)) || g != g && want != want
			}
			if bits[i] != c.bits(v) && !(want != want) {
				t.Errorf("%v: bits of %v = %#04x, want %#04x", c.dt, v, bits[i], c.bits(v))
			}
			if !same(f32[i]) || !same(float32(f64[i])) || !same(back[i]) {
				t.Errorf("%v: %v → Float32s %v, Float64s %v, Cast back %v; want %v", c.dt, v, f32[i], f64[i], back[i], want)
			}
		}
		if got := h.Narrow(0, 1, 1).Narrow(1, 1, 1).Item(); got != float64(c.widen(c.bits(src[5]))) {
			t.Errorf("%v: Item of a view = %v", c.dt, got)
		}
		if s := h.String(); !strings.Contains(s, c.prints) || !strings.Contains(s, "-2.5000") || !strings.Contains(s, "nan") {
			t.Errorf("%v: String = %s", c.dt, s)
		}
		if s := FullOf(c.dt, 1.5, 2).String(); s != "tensor([1.5000, 1.5000], shape=[2], "+c.prints+", device=cpu)" {
			t.Errorf("%v: FullOf prints %s", c.dt, s)
		}
		if z := ZerosOf(c.dt, 2, 2).Float32s(); len(z) != 4 || z[3] != 0 {
			t.Errorf("%v: ZerosOf = %v", c.dt, z)
		}
		// Casts between the two 16-bit formats and to float64 and int32.
		if got := h.Cast(Float64).Float64s(); got[2] != -2.5 {
			t.Errorf("%v → float64: %v", c.dt, got)
		}
		if got := FromSlice([]float32{-2.7, 3.9}).Cast(c.dt).Cast(Int32).Int32s(); got[0] != -2 || got[1] != 3 {
			t.Errorf("%v → int32: %v, want [-2 3]", c.dt, got)
		}
		if got := FromSlice([]int32{-3, 7}).Cast(c.dt).Float32s(); got[0] != -3 || got[1] != 7 {
			t.Errorf("int32 → %v: %v", c.dt, got)
		}

		// The gradient of a cast casts back: d/dx Σ cast(cast(x, half), f32)·w = w,
		// as a float32 gradient of x.
		xg := FromSlice([]float32{1, 2, 3}).RequiresGrad()
		w := FromSlice([]float32{0.5, -1, 3})
		xg.Cast(c.dt).Cast(Float32).Mul(w).Sum().Backward()
		g := xg.Grad()
		if g == nil || g.DType() != Float32 {
			t.Fatalf("%v: gradient %v", c.dt, g)
		}
		if gv := g.Float32s(); gv[0] != 0.5 || gv[1] != -1 || gv[2] != 3 {
			t.Errorf("%v: gradient %v, want [0.5 -1 3]", c.dt, gv)
		}
	}
	// float16 ↔ bfloat16 rounds once from the exact value.
	if got := FromSlice([]float32{1 + 0x1p-10}).Cast(Float16).Cast(BFloat16).Float32s()[0]; got != 1 {
		t.Errorf("float16 → bfloat16 of 1+2⁻¹⁰: %v, want 1", got)
	}
}

// TestHalfErrors checks the errors around half tensors: the CPU computes
// nothing in them (its kernels name the dtype), Int32s refuses them, and
// FromSlice does not take bit patterns.
func TestHalfErrors(t *testing.T) {
	h := Ones(2, 2).Cast(Float16)
	err := Try(func() { h.Exp() })
	if err == nil || !strings.Contains(err.Error(), "unsupported dtype float16") {
		t.Errorf("Exp of float16 on the cpu: %v", err)
	}
	err = Try(func() { h.Add(Ones(2, 2)) })
	if err == nil || !strings.Contains(err.Error(), "dtypes differ") {
		t.Errorf("float16 + float32: %v", err)
	}
	err = Try(func() { h.Int32s() })
	if err == nil || !strings.Contains(err.Error(), "not int32") {
		t.Errorf("Int32s of float16: %v", err)
	}
	err = Try(func() { FromSlice([]uint16{1, 2}) })
	if err == nil || !strings.Contains(err.Error(), "Cast") {
		t.Errorf("FromSlice([]uint16): %v", err)
	}
	err = Try(func() { FromSlice([]int32{1}).Float32s() })
	if err == nil || !strings.Contains(err.Error(), "not float32, float16 or bfloat16") {
		t.Errorf("Float32s of int32: %v", err)
	}
	err = Try(func() { Ones(2).Cast(DType(99)) })
	if err == nil || !strings.Contains(err.Error(), "Float16 or BFloat16") {
		t.Errorf("Cast to an unknown dtype: %v", err)
	}
}
func TestHalfBackwardSeedAndRandn(t *testing.T) {
	for _, dt := range []DType{Float16, BFloat16} {
		x := FromSlice([]float32{1, 2, 3}).Cast(dt).RequiresGrad()
		x.Cast(Float32).Square().Sum().Cast(dt).Backward()
		g := x.Grad().Float32s()
		if g[0] != 2 || g[1] != 4 || g[2] != 6 {
			t.Errorf("%v: grad %v, want [2 4 6]", dt, g)
		}
		r := NewGenerator(1).Randn(dt, 1000)
		st := r.Cast(Float32).Stats()
		if st.Mean < -0.2 || st.Mean > 0.2 || st.Std < 0.8 || st.Std > 1.2 {
			t.Errorf("%v: randn stats %v", dt, st)
		}
	}
}

// TestNormDTypes checks the dtype rules of the norms (the forge side; the
// 16-bit kernels are Metal's): float32 with one 16-bit dtype may mix —
// the CPU, without a 16-bit norm kernel, then composes the norm in
// float32 and rounds the result once — but two 16-bit dtypes, float32
// with float64, or a float64 output do not, and the errors name the
// tensors. The statistics of a 16-bit norm are float32.
func TestNormDTypes(t *testing.T) {
	x := Ones(3, 4)
	w := Ones(4)
	for _, c := range []struct {
		name string
		f    func()
		want string
	}{
		{"float16 x, bfloat16 y", func() { RMSNormAs(BFloat16, x.Cast(Float16), nil, 1e-5) }, "mixes float16 and bfloat16"},
		{"float16 y, bfloat16 w", func() { LayerNormAs(Float16, x, w.Cast(BFloat16), nil, 1e-5) }, "mixes float16 and bfloat16"},
		{"float64 weight", func() { RMSNorm(x, w.Cast(Float64), 1e-5) }, "weight float64 [4] does not match input float32 [3 4]"},
		{"float64 output", func() { RMSNormAs(Float64, x, w, 1e-5) }, "output dtype float64 differs from input float32"},
		{"int32 output", func() { RMSNormAs(Int32, x, w, 1e-5) }, "needs float tensors"},
	} {
		err := Try(c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	xs := FromSlice([]float32{1, -2, 3, 0.5, 7, 1e-3, -0.25, 4}, 2, 4)
	ws := FromSlice([]float32{1, 0.5, -2, 3})
	got := RMSNormAs(BFloat16, xs, ws, 1e-5).Cast(Float32).Float32s()
	want := RMSNorm(xs, ws, 1e-5).Cast(BFloat16).Cast(Float32).Float32s()
	for i := range want {
		// Both round a float32 result (a few ulps apart) to bfloat16:
		// at most one bfloat16 ulp (2⁻⁷ relative) apart.
		if math.Abs(float64(got[i]-want[i])) > 0x1p-7*math.Abs(float64(want[i])) {
			t.Errorf("RMSNormAs(bfloat16) on the cpu = %v, want the float32 norm rounded, %v", got, want)
			break
		}
	}
	if st := normDTypes("rms_norm", x, BFloat16, w); st != Float32 {
		t.Errorf("statistics of a bfloat16 norm: %v, want float32", st)
	}
	if st := normDTypes("rms_norm", x.Cast(Float64), Float64, w.Cast(Float64)); st != Float64 {
		t.Errorf("statistics of a float64 norm: %v, want float64", st)
	}
}
