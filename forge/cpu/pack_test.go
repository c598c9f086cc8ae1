package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackRuns: packRuns (on this CPU, the assembly copy where there is
// one) lays out every width-wide sliver exactly as the definition says —
// value (p, s·width+i) at dst[s·kc·width + p·width + i], zeros past n —
// for widths of every kernel (6, 12, 16, 32) and odd ones, ragged n,
// leading dimensions wider than n, and alpha ≠ 1 (the Go loop); dst
// past the slivers is not written.
func TestPackRuns(t *testing.T) {
	t.Logf("assembly copy in use: %v", packRuns32 != nil)
	r := rand.New(rand.NewPCG(7, 8))
	for _, width := range []int{1, 6, 12, 13, 16, 17, 31, 32} {
		for _, n := range []int{1, 5, 12, 16, 31, 32, 33, 100} {
			for _, kc := range []int{1, 3, 64} {
				for _, alpha := range []float32{1, -0.5} {
					ld := n + 3
					src := randSlice[float32](r, (kc-1)*ld+n)
					slivers := (n + width - 1) / width
					dst := make([]float32, slivers*kc*width+7)
					const canary = float32(12345)
					for i := range dst {
						dst[i] = canary
					}
					packRuns(dst, src, ld, n, width, kc, alpha)
					for s := range slivers {
						for p := range kc {
							for i := range width {
								j := s*width + i
								want := float32(0)
								if j < n {
									want = alpha * src[p*ld+j]
								}
								if got := dst[s*kc*width+p*width+i]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("width %d n %d kc %d alpha %v: sliver %d row %d lane %d = %v, want %v", width, n, kc, alpha, s, p, i, got, want)
								}
							}
						}
					}
					for i := slivers * kc * width; i < len(dst); i++ {
						if dst[i] != canary {
							t.Fatalf("width %d n %d kc %d: wrote dst[%d] past the slivers", width, n, kc, i)
						}
					}
				}
			}
		}
	}
}
