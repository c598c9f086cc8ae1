package metal

// GradClip and AdamWClipped (ops_optim.go): the device-side global-norm
// clip against the CPU's.

import (
	"math"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// TestGradClipMatchesCPU runs GradClip and AdamWClipped on the emulator and
// on the CPU from the same sums, weights, gradients and moments: the
// state, and the updated weights and moments, must agree (float32 on the
// device, float64 state on the CPU); a non-finite norm must leave
// everything untouched, bit for bit.
func TestGradClipMatchesCPU(t *testing.T) {
	e := newOpsEnv(t)
	const n = 3001
	p := backend.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3}
	for _, c := range []struct {
		name    string
		sums    []float64
		maxNorm float64
		unscale float64 // 1/loss scale
	}{
		{"clipped", []float64{3.5, 0.25, 120, 1e-3, 7}, 1, 1},
		{"unclipped", []float64{0.01, 0.02, 0.03}, 1, 1},
		{"no clipping", []float64{30, 40}, 0, 1},
		{"nan", []float64{1, math.NaN(), 2}, 1, 1},
		{"inf", []float64{1, math.Inf(1)}, 1, 1},
		{"no sums", nil, 1, 1},
		// Sums of gradients times 2¹⁶: the norm is the true one, the
		// coefficient carries 2⁻¹⁶ (clipped, and not).
		{"loss scale, clipped", []float64{3.5 * 0x1p32, 0.25 * 0x1p32, 120 * 0x1p32}, 1, 0x1p-16},
		{"loss scale, unclipped", []float64{0.01 * 0x1p32, 0.02 * 0x1p32}, 1, 0x1p-16},
		{"loss scale, no clipping", []float64{30 * 0x1p32}, 0, 0x1p-16},
	} {
		sums := e.newPair(backend.Float32, contig(len(c.sums)), func(i int) float64 {
			if i < len(c.sums) {
				return c.sums[i]
			}
			return 0
		})
		stDev := e.dev.Alloc(backend.Float32, backend.ClipStateLen)
		stRef := e.ref.Alloc(backend.Float64, backend.ClipStateLen)
		sv := func(b backend.Buffer) backend.View {
			return backend.View{Buf: b, Shape: []int{backend.ClipStateLen}, Strides: []int{1}}
		}
		e.dev.GradClip(sv(stDev), sums.dev, c.maxNorm, c.unscale)
		e.ref.GradClip(sv(stRef), sums.ref, c.maxNorm, c.unscale)
		got := make([]float32, backend.ClipStateLen)
		want := make([]float64, backend.ClipStateLen)
		e.dev.Read(stDev, got)
		e.ref.Read(stRef, want)
		for i := range want {
			g, w := float64(got[i]), want[i]
			if math.IsNaN(w) != math.IsNaN(g) || (!math.IsNaN(w) && math.Abs(g-w) > 1e-6*max(c.unscale, math.Abs(w))) {
				t.Errorf("%s: state[%d] = %v on metal-emu, %v on the CPU", c.name, i, g, w)
			}
		}
		w := e.newPair(backend.Float32, contig(n), e.normal)
		// Gradients of the loss times the loss scale (1/unscale), as the
		// sums say.
		g := e.newPair(backend.Float32, contig(n), func(int) float64 { return 3 * e.rng.NormFloat64() / c.unscale })
		m := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0.1 * e.rng.NormFloat64() })
		v := e.newPair(backend.Float32, contig(n), func(int) float64 { return 0.1 * e.rng.Float64() })
		w0, _ := e.read(w)
		e.dev.AdamWClipped(w.dev, g.dev, m.dev, v.dev, sv(stDev), p)
		e.ref.AdamWClipped(w.ref, g.ref, m.ref, v.ref, sv(stRef), p)
		worst := 0.0
		for _, x := range []pair{w, m, v, g} {
			worst = max(worst, e.compare(c.name, x, 1e-5))
		}
		if want[backend.ClipSkip] != 0 {
			w1, _ := e.read(w)
			for i := range w0 {
				if math.Float64bits(w0[i]) != math.Float64bits(w1[i]) {
					t.Errorf("%s: a skipped update changed weight %d from %v to %v", c.name, i, w0[i], w1[i])
					break
				}
			}
		}
		t.Logf("%s: norm %.6g, coef %.6g, skip %v; updated weights and moments within %.1e of the CPU", c.name, got[0], got[1], got[2], worst)
	}
}
