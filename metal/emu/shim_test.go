package emu

import (
	"encoding/binary"
	"math"
	"testing"
)

// TestShimFeatures checks the shim's vectors, math, limits, half/bfloat
// rounding, packed types and built-in conversions.
func TestShimFeatures(t *testing.T) {
	d := testDriver(t)
	in := f32buf(t, d, []float32{1.5, -2, 3.25, 4})
	out := f32buf(t, d, make([]float32, 64))
	pairs, _ := d.NewBuffer(64)
	pb := pairs.Bytes()
	// Pair: float2 a (8 bytes), packed_float3 p (12), half h (2): offsets 0, 8, 20.
	binary.LittleEndian.PutUint32(pb[4:], math.Float32bits(10))
	binary.LittleEndian.PutUint32(pb[16:], math.Float32bits(20))
	binary.LittleEndian.PutUint16(pb[20:], 0x3c00) // half 1.0
	hout, _ := d.NewBuffer(8)
	bout, _ := d.NewBuffer(8)
	if err := run(d, pipe(t, d, "shim_features"), [3]int{2, 1, 1}, [3]int{3, 2, 1}, bufArg(in), bufArg(out), bufArg(pairs), bufArg(hout), bufArg(bout)); err != nil {
		t.Fatal(err)
	}
	e := float32(math.E)
	want := []float32{12, 8, 6.75, 5, 4, -2, 1,
		e, 8, 4, 0.5, 7, 1 + 0, 2.5, 2, 7 - 2, 5.5, 1, 65504, 1, float32(math.Tanh(0.5)), 1, 127, 2.5 + 6, -4, 4 + 4 + 31,
		10 + 20 + 1, 0 + 6 + 2, 1, 1 + 6, 21, 6.5, 10}
	got := f32s(out)
	for i, w := range want {
		if math.Abs(float64(got[i]-w)) > 1e-6*math.Max(1, math.Abs(float64(w))) {
			t.Errorf("out[%d] = %v, want %v", i, got[i], w)
		}
	}
	if got[len(want)] != float32(len(want)) {
		t.Errorf("%v results, want %d", got[len(want)], len(want))
	}
	if h := binary.LittleEndian.Uint16(hout.Bytes()); h != 0x4480 { // 1.5*3 = 4.5
		t.Errorf("half 1.5*3 = %#x, want 0x4480", h)
	}
	if b := binary.LittleEndian.Uint16(bout.Bytes()); b != 0x3f80 { // bfloat 1.0
		t.Errorf("bfloat(1+2^-8) = %#x, want 0x3f80", b)
	}
	if b := binary.LittleEndian.Uint16(bout.Bytes()[2:]); b != 0xc000 { // bfloat -2
		t.Errorf("bfloat(-2) = %#x, want 0xc000", b)
	}
}
