package emu

import (
	"testing"
)

func TestAddScaled(t *testing.T) {
	d := testDriver(t)
	n := 1000
	a := make([]float32, n)
	b := make([]float32, n)
	for i := range a {
		a[i] = float32(i)
		b[i] = float32(2 * i)
	}
	ba, bb := f32buf(t, d, a), f32buf(t, d, b)
	out := f32buf(t, d, make([]float32, n))
	p := pipe(t, d, "add_scaled")
	params := append(u32bytes(uint32(n)), f32bytes(0.5)...)
	if err := run(d, p, [3]int{(n + 127) / 128, 1, 1}, [3]int{128, 1, 1}, bufArg(ba), bufArg(bb), bufArg(out), bytesArg(params)); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32s(out) {
		if want := a[i] + 0.5*b[i]; v != want {
			t.Fatalf("out[%d] = %v, want %v", i, v, want)
		}
	}
}
