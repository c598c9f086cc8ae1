//go:build amd64 && !purego

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowOpsAVX2 checks the assembly row primitives against the Go loops of
// rowops.go for every length up to 70 and a few offsets: the element-wise
// ones bit for bit, rowMax32 exactly (NaNs skipped, −Inf rows), dot32 to
// float64 rounding.
func TestRowOpsAVX2(t *testing.T) {
	if !expAVX2 {
		t.Skip("no AVX2/FMA")
	}
	rng := rand.New(rand.NewPCG(71, 72))
	buf := make([]float32, 80)
	wb := make([]float32, 80)
	for n := 0; n <= 70; n++ {
		for off := 0; off < 3; off++ {
			x, w := buf[off:off+n], wb[off:off+n]
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
				w[i] = float32(rng.NormFloat64())
			}
			if n > 2 && off == 1 {
				x[rng.IntN(n)] = float32(math.NaN())
			}
			if n > 0 && off == 2 {
				for i := range x {
					x[i] = float32(math.Inf(-1))
				}
			}
			var got float32 = float32(math.Inf(-1))
			if n > 0 {
				got = rowMax32AVX2(&x[0], n)
			}
			if want := rowMax32Go(x); got != want {
				t.Fatalf("rowMax32 n=%d off=%d: %v, want %v", n, off, got, want)
			}
			if n == 0 {
				continue
			}
			if off == 2 {
				continue // the −Inf rows make the rest NaN or Inf
			}
			d, want := dot32AVX2(&x[0], &w[0], n), dot32Go(x, w)
			if math.IsNaN(want) != math.IsNaN(d) || !math.IsNaN(want) && math.Abs(d-want) > 1e-12*(math.Abs(want)+1) {
				t.Fatalf("dot32 n=%d: %v, want %v", n, d, want)
			}
			a := rng.Float64() + 0.5
			g, h := make([]float32, n), make([]float32, n)
			scale32AVX2(&g[0], &x[0], n, a)
			scale32Go(h, x, a)
			for i := range g {
				if math.Float32bits(g[i]) != math.Float32bits(h[i]) {
					t.Fatalf("scale32 n=%d element %d: %v, want %v", n, i, g[i], h[i])
				}
			}
			scaleMul32AVX2(&g[0], &x[0], &w[0], n, a)
			scaleMul32Go(h, x, w, a)
			for i := range g {
				if math.Float32bits(g[i]) != math.Float32bits(h[i]) {
					t.Fatalf("scaleMul32 n=%d element %d: %v, want %v", n, i, g[i], h[i])
				}
			}
		}
	}
}
