//go:build amd64 && !purego

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// TestAdamWAVX512MatchesGo: the AVX-512 AdamW gives the Go loop's bits,
// for lengths with every tail, over a few steps (m, v of all sizes, zero
// gradients, weight decay or not).
func TestAdamWAVX512MatchesGo(t *testing.T) {
	if !expAVX512 {
		t.Skip("no AVX-512")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 1000} {
		w := make([]float32, n)
		g := make([]float32, n)
		for i := range w {
			w[i] = float32(rng.NormFloat64())
		}
		m, v := make([]float32, n), make([]float32, n)
		w2, m2, v2 := append([]float32(nil), w...), make([]float32, n), make([]float32, n)
		for step := 1; step <= 5; step++ {
			for i := range g {
				g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(8)-6)))
				if rng.IntN(7) == 0 {
					g[i] = 0
				}
			}
			c := newAdamWCoefs(backend.AdamWParams{LR: 3e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1 * float64(step%2), Step: step})
			if !adamwSlice32(c, w, g, m, v) {
				t.Fatal("adamwSlice32 did not run")
			}
			adamwSliceGo(c, w2, g, m2, v2)
			for i := range w {
				if math.Float32bits(w[i]) != math.Float32bits(w2[i]) || math.Float32bits(m[i]) != math.Float32bits(m2[i]) ||
					math.Float32bits(v[i]) != math.Float32bits(v2[i]) {
					t.Fatalf("n=%d step %d [%d]: asm w,m,v = %v,%v,%v; Go %v,%v,%v", n, step, i, w[i], m[i], v[i], w2[i], m2[i], v2[i])
				}
			}
		}
	}
}
