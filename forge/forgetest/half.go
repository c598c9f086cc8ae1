package forgetest

// HalfConversions: the 16-bit storage dtypes (Float16, BFloat16) on a
// device. Every backend stores them, fills them and converts them (Copy,
// reached through Cast, Contiguous, CopyFrom and To); the expected values
// come from package forge/half, the host reference, which is checked on
// its own against math/big, float64 formulas and numpy. Compute kernels on
// 16-bit views are the backend's choice and not checked here.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/half"
)

// HalfConversions runs the 16-bit conversion checks on dev.
func HalfConversions(t *testing.T, dev *forge.Device) {
	for _, dt := range []forge.DType{forge.Float16, forge.BFloat16} {
		ref := halfRefs[dt]
		run := func(name string, check func(*testing.T, *forge.Device, halfRef)) {
			t.Run(name+"_"+dt.String(), func(t *testing.T) { check(t, dev, ref) })
		}
		run("every_value_round_trips", halfEveryValue)
		run("cast_rounds_to_nearest_even", halfCastRounds)
		run("strided_and_broadcast_views", halfViews)
		run("fill", halfFill)
		run("cast_between_dtypes", halfBetween)
		run("cast_gradient", halfGradient)
	}
}

// halfRef is the host reference of one 16-bit dtype.
type halfRef struct {
	dt      forge.DType
	bits    func(float32) uint16 // narrowing, ties to even
	bits64  func(float64) uint16 // narrowing from float64, one rounding
	widen   func(uint16) float32 // exact
	expMask uint16
}

var halfRefs = map[forge.DType]halfRef{
	forge.Float16:  {forge.Float16, half.Float16Bits, half.Float16BitsFrom64, half.Float16FromBits, 0x7c00},
	forge.BFloat16: {forge.BFloat16, half.BFloat16Bits, half.BFloat16BitsFrom64, half.BFloat16FromBits, 0x7f80},
}

func (r halfRef) isNaN(h uint16) bool { return h&r.expMask == r.expMask && h&^(0x8000|r.expMask) != 0 }

// value is the float64 value of h.
func (r halfRef) value(h uint16) float64 { return float64(r.widen(h)) }

// halfSame reports whether got and want are the same value: equal with
// equal signs (so −0 ≠ +0), or both NaN (payloads and NaN signs are not
// part of the contract).
func halfSame(got, want float64) bool {
	if math.IsNaN(want) || math.IsNaN(got) {
		return math.IsNaN(want) && math.IsNaN(got)
	}
	return got == want && math.Signbit(got) == math.Signbit(want)
}

// halfExpectBits compares a 16-bit tensor's bits with want (NaN-ness only
// for NaNs), failing with the first mismatches.
func halfExpectBits(t *testing.T, r halfRef, what string, x *forge.Tensor, want []uint16, inputs []float32) {
	t.Helper()
	if x.DType() != r.dt {
		t.Fatalf("%s: dtype %v, want %v", what, x.DType(), r.dt)
	}
	got := x.Data().([]uint16)
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		ok := got[i] == want[i] || r.isNaN(want[i]) && r.isNaN(got[i])
		if !ok {
			if bad++; bad <= 5 {
				in := ""
				if inputs != nil {
					in = fmt.Sprintf(" (from %v = %#08x)", inputs[i], math.Float32bits(inputs[i]))
				}
				t.Errorf("%s[%d] = %#04x (%v), want %#04x (%v)%s", what, i, got[i], r.value(got[i]), want[i], r.value(want[i]), in)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// halfExpectValues compares float64 values with want.
func halfExpectValues(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		if !halfSame(got[i], want[i]) {
			if bad++; bad <= 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// halfEveryValue casts every one of the 65536 16-bit values, widened on
// the host to float32, to the dtype on the device (each must come back
// with its bits) and back to float32 (each must be the exact value).
func halfEveryValue(t *testing.T, dev *forge.Device, r halfRef) {
	all := make([]uint16, 1<<16)
	vals := make([]float32, len(all))
	for i := range all {
		all[i] = uint16(i)
		vals[i] = r.widen(all[i])
	}
	h := forge.FromSlice(vals, 256, 256).To(dev).Cast(r.dt)
	halfExpectBits(t, r, "cast of every value", h, all, vals)
	want := make([]float64, len(all))
	for i, v := range vals {
		want[i] = float64(v)
	}
	halfExpectValues(t, "cast back to float32", h.Cast(forge.Float32).Float64s(), want)
	halfExpectValues(t, "Float64s", h.Float64s(), want)
}

// halfInputs returns float32 values that exercise the rounding: the
// midpoints between adjacent 16-bit values and their float32 neighbours,
// subnormals, values past the largest finite one, signed zeros, Inf, NaN,
// and random bit patterns.
func halfInputs(r halfRef, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r.dt), 99))
	v := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 65504, 65519.996, 65520, -65520, 1e5, 3.4e38, -3.4e38,
		0x1p-24, 0x1p-25, 0x1.8p-25, 0x1p-26, 0x1p-126, 0x1p-133, 0x1p-134, 0x1.8p-134, 1e-45, -1e-45}
	for len(v) < n {
		switch rng.IntN(3) {
		case 0: // a midpoint, or a float32 step either side of one
			h := uint16(rng.IntN(1 << 16))
			if r.isNaN(h) || r.isNaN(h+1) || h&0x7fff == r.expMask || (h+1)&0x7fff == 0 {
				continue
			}
			a, b := r.value(h), r.value(h+1)
			if math.IsInf(b, 0) {
				continue
			}
			m := float32((a + b) / 2) // exact: needs at most 12 bits
			switch rng.IntN(3) {
			case 1:
				m = math.Nextafter32(m, float32(math.Inf(1)))
			case 2:
				m = math.Nextafter32(m, float32(math.Inf(-1)))
			}
			v = append(v, m)
		case 1: // any float32
			v = append(v, math.Float32frombits(rng.Uint32()))
		default: // a magnitude within the 16-bit range
			x := math.Ldexp(rng.Float64()+0.5, rng.IntN(60)-35)
			if rng.IntN(2) == 0 {
				x = -x
			}
			v = append(v, float32(x))
		}
	}
	return v
}

// halfCastRounds casts float32 values that need rounding to the dtype on
// the device and compares the bits with the reference; the narrowed
// values read back as float32 must be the reference's widened values.
func halfCastRounds(t *testing.T, dev *forge.Device, r halfRef) {
	in := halfInputs(r, 20000)
	want := make([]uint16, len(in))
	wantV := make([]float64, len(in))
	for i, x := range in {
		want[i] = r.bits(x)
		wantV[i] = r.value(want[i])
	}
	h := forge.FromSlice(in).To(dev).Cast(r.dt)
	halfExpectBits(t, r, "cast", h, want, in)
	halfExpectValues(t, "cast and back", h.Cast(forge.Float32).Float64s(), wantV)
	f32 := h.Float32s()
	got := make([]float64, len(f32))
	for i, x := range f32 {
		got[i] = float64(x)
	}
	halfExpectValues(t, "Float32s", got, wantV)
	// Item reads one element of a view.
	if got := h.Narrow(0, 7, 1).Reshape().Item(); !halfSame(got, wantV[7]) {
		t.Errorf("Item of element 7 = %v, want %v", got, wantV[7])
	}
}

// halfViews casts strided, offset and broadcast float32 views to the
// dtype and back, copies 16-bit views (same dtype, strided and broadcast
// sources), and writes into a strided 16-bit destination with CopyFrom.
func halfViews(t *testing.T, dev *forge.Device, r halfRef) {
	const rows, cols = 19, 33
	in := halfInputs(r, rows*cols)
	base := forge.FromSlice(in, rows, cols).To(dev)
	// at returns the reference bits of in[i][j].
	at := func(i, j int) uint16 { return r.bits(in[i*cols+j]) }
	build := func(n, m int, f func(i, j int) uint16) []uint16 {
		out := make([]uint16, 0, n*m)
		for i := range n {
			for j := range m {
				out = append(out, f(i, j))
			}
		}
		return out
	}
	// A transposed view.
	halfExpectBits(t, r, "cast of a transposed view", base.T().Cast(r.dt), build(cols, rows, func(i, j int) uint16 { return at(j, i) }), nil)
	// A window at an offset, with a row stride larger than its width.
	win := base.Narrow(0, 3, 10).Narrow(1, 5, 20)
	halfExpectBits(t, r, "cast of a window", win.Cast(r.dt), build(10, 20, func(i, j int) uint16 { return at(3+i, 5+j) }), nil)
	// Broadcast: one row repeated, and one element everywhere.
	row := base.Narrow(0, 4, 1)
	halfExpectBits(t, r, "cast of a broadcast row", row.Expand(7, cols).Cast(r.dt), build(7, cols, func(i, j int) uint16 { return at(4, j) }), nil)
	one := base.Narrow(0, 2, 1).Narrow(1, 9, 1)
	halfExpectBits(t, r, "cast of a broadcast element", one.Expand(5, 6).Cast(r.dt), build(5, 6, func(i, j int) uint16 { return at(2, 9) }), nil)

	// 16-bit sources: a transposed view made contiguous (a same-dtype
	// strided copy), a broadcast view of a 16-bit row, and a strided
	// 16-bit view cast back to float32.
	h := base.Cast(r.dt)
	halfExpectBits(t, r, "16-bit transposed view made contiguous", h.T().Contiguous(), build(cols, rows, func(i, j int) uint16 { return at(j, i) }), nil)
	halfExpectBits(t, r, "16-bit broadcast row made contiguous", h.Narrow(0, 6, 1).Expand(4, cols).Contiguous(), build(4, cols, func(i, j int) uint16 { return at(6, j) }), nil)
	back := h.Narrow(1, 1, 16).T().Cast(forge.Float32).Float64s()
	want := make([]float64, 0, len(back))
	for j := 1; j < 17; j++ {
		for i := range rows {
			want = append(want, r.value(at(i, j)))
		}
	}
	halfExpectValues(t, "strided 16-bit view cast to float32", back, want)

	// A strided destination: CopyFrom into every other column of a 16-bit
	// tensor, from float32 (converting) and from a broadcast 16-bit row.
	dst := forge.FromSlice(make([]float32, rows*cols*2), rows, 2*cols).To(dev).Cast(r.dt)
	pairs := dst.Reshape(rows, cols, 2) // a view: element (i, j, k) is dst[i][2j+k]
	forge.NoGrad(func() { pairs.Narrow(2, 1, 1).CopyFrom(base.Reshape(rows, cols, 1)) })
	halfExpectBits(t, r, "CopyFrom float32 into a strided 16-bit view", dst, build(rows, 2*cols, func(i, j int) uint16 {
		if j%2 == 0 {
			return 0
		}
		return at(i, j/2)
	}), nil)
	forge.NoGrad(func() { pairs.Narrow(2, 0, 1).CopyFrom(h.Narrow(0, 0, 1).Reshape(1, cols, 1)) })
	halfExpectBits(t, r, "CopyFrom a broadcast 16-bit row into a strided view", dst, build(rows, 2*cols, func(i, j int) uint16 {
		if j%2 == 0 {
			return at(0, j/2)
		}
		return at(i, j/2)
	}), nil)
}

// halfFill fills 16-bit tensors and compares with the reference's one
// rounding from float64 (so 1+2⁻¹¹+2⁻⁴⁰ is not a tie for float16: a fill
// that rounds through float32 first gets it wrong).
func halfFill(t *testing.T, dev *forge.Device, r halfRef) {
	like := forge.FromSlice(make([]float32, 3*70), 3, 70).To(dev).Cast(r.dt)
	for _, v := range []float64{0, math.Copysign(0, -1), 1, -2.5, 1.0 / 3, 65504, 65520, 1e6, -1e39,
		0x1p-24, 0x1p-25, 1e-8, 1e-40, 1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-8 + 0x1p-40, math.Inf(-1), math.NaN()} {
		want := make([]uint16, like.Numel())
		for i := range want {
			want[i] = r.bits64(v)
		}
		halfExpectBits(t, r, fmt.Sprintf("FullLike(%v)", v), forge.FullLike(like, v), want, nil)
	}
	halfExpectBits(t, r, "ZerosLike", forge.ZerosLike(like), make([]uint16, like.Numel()), nil)
}

// halfBetween casts between the two 16-bit dtypes (one rounding from the
// exact value) and to and from int32 (truncation toward zero; integers
// exact in the dtype).
func halfBetween(t *testing.T, dev *forge.Device, r halfRef) {
	other := halfRefs[forge.BFloat16]
	if r.dt == forge.BFloat16 {
		other = halfRefs[forge.Float16]
	}
	in := halfInputs(r, 4000)
	h := forge.FromSlice(in).To(dev).Cast(r.dt)
	want := make([]uint16, len(in))
	for i, x := range in {
		want[i] = other.bits64(r.value(r.bits(x)))
	}
	halfExpectBits(t, other, fmt.Sprintf("cast %v → %v", r.dt, other.dt), h.Cast(other.dt), want, nil)

	ints := []int32{0, 1, -1, 7, -100, 255, -256, 1000}
	hi := forge.FromSlice(ints).To(dev).Cast(r.dt)
	wantI := make([]uint16, len(ints))
	for i, x := range ints {
		wantI[i] = r.bits64(float64(x))
	}
	halfExpectBits(t, r, "cast from int32", hi, wantI, nil)

	fr := []float32{-2.75, -0.5, 0.75, 2.5, 3.9, -7.1, 100.6, 250}
	gotI := forge.FromSlice(fr).To(dev).Cast(r.dt).Cast(forge.Int32).Int32s()
	for i, x := range fr {
		if w := int32(math.Trunc(r.value(r.bits(x)))); gotI[i] != w {
			t.Errorf("cast %v(%v) to int32 = %d, want %d", r.dt, x, gotI[i], w)
		}
	}
}

// halfGradient checks that Cast's gradient casts back: for
// L = Σ w·float32(half(x)), dL/dx = w as a float32 gradient (the cast's
// rounding has derivative one).
func halfGradient(t *testing.T, dev *forge.Device, r halfRef) {
	x := forge.FromSlice([]float32{1, 2.5, -3, 0.1, 1e5}, 5).To(dev).Detach().RequiresGrad()
	wv := []float32{0.5, -1, 3, 0.25, -2}
	w := forge.FromSlice(wv, 5).To(dev)
	x.Cast(r.dt).Cast(forge.Float32).Mul(w).Sum().Backward()
	g := x.Grad()
	if g == nil || g.DType() != forge.Float32 {
		t.Fatalf("gradient of x is %v, want float32", g)
	}
	got := g.Float64s()
	for i, v := range wv {
		// The gradient passes through the 16-bit dtype on its way back.
		if want := r.value(r.bits(v)); got[i] != want {
			t.Errorf("grad[%d] = %v, want %v", i, got[i], want)
		}
	}
}
