package metal

// GradClip and AdamWClipped (ops_optim.go): the device-side global-norm
// clip against the CPU's, its results across thread schedules, and the
// dtypes it refuses (float32 only: Metal has no float64, and the clip's
// state and sums are never 16-bit).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
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

// TestOpsOptimSchedules runs GradClip (one thread) and AdamWClipped, from a
// clipping state and from a skipping one, under the emulator's forward,
// reverse and random schedules: the results must agree bit for bit.
func TestOpsOptimSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(13, 14))
	const n = 3001
	in := make([]float32, 3*n)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		dev := e.dev
		v := contigView
		read := func(what string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, what)
		}
		p := backend.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3}
		for _, c := range []struct {
			name string
			sums []float32
		}{{"clipped", []float32{3.5, 0.25, 120, 1e-3, 7}}, {"skipped", []float32{1, float32(math.Inf(1))}}} {
			sums, st := dev.Alloc(backend.Float32, len(c.sums)), dev.Alloc(backend.Float32, backend.ClipStateLen)
			dev.Write(sums, c.sums)
			dev.GradClip(v(st, 0, backend.ClipStateLen), v(sums, 0, len(c.sums)), 1, 0.5)
			read("grad_clip state "+c.name, st, backend.ClipStateLen)
			x := dev.Alloc(backend.Float32, 3*n)
			dev.Write(x, in)
			m, mv := dev.Alloc(backend.Float32, n), dev.Alloc(backend.Float32, n)
			dev.Fill(v(m, 0, n), 0.01)
			dev.Fill(v(mv, 0, n), 0.02)
			dev.AdamWClipped(v(x, 0, n), v(x, n, n), v(m, 0, n), v(mv, 0, n), v(st, 0, backend.ClipStateLen), p)
			read("adamw clipped param "+c.name, x, n)
			read("adamw clipped m "+c.name, m, n)
			read("adamw clipped v "+c.name, mv, n)
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsOptimRefused: the clip's views are float32 (Metal has no
// float64; the state and the sums are never 16-bit): other dtypes panic
// naming the kernel, before any kernel runs.
func TestOpsOptimRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kGradClip: func() { b.GradClip(f64, f64, 1, 1) },
		}
	})
	e := newOpsEnv(t)
	st := e.newPair(backend.Float32, contig(backend.ClipStateLen), mhFill(0))
	sums := e.newPair(backend.Float32, contig(2), mhFill(1))
	w := e.newPair(backend.Float32, contig(4), e.normal)
	p := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}
	for _, dt := range halfTypes {
		st16 := e.newPair(dt, contig(backend.ClipStateLen), mhFill(0))
		sums16 := e.newPair(dt, contig(2), mhFill(1))
		w16 := e.newPair(dt, contig(4), e.normal)
		want := "unsupported dtype " + dt.String()
		wantPanic(t, fmt.Sprintf("grad_clip %v state", dt), func() { e.dev.GradClip(st16.dev, sums.dev, 1, 1) }, "metal: "+kGradClip+": ", want)
		wantPanic(t, fmt.Sprintf("grad_clip %v sums", dt), func() { e.dev.GradClip(st.dev, sums16.dev, 1, 1) }, "metal: "+kGradClip+": ", want)
		wantPanic(t, fmt.Sprintf("adamw_clipped %v state", dt), func() { e.dev.AdamWClipped(w.dev, w.dev, w.dev, w.dev, st16.dev, p) }, "metal: "+kAdamW+": ", want)
		wantPanic(t, fmt.Sprintf("adamw_clipped %v param", dt), func() { e.dev.AdamWClipped(w16.dev, w16.dev, w16.dev, w16.dev, st.dev, p) }, "metal: "+kAdamW+": ", want)
	}
	wantPanic(t, "adamw_clipped without a state", func() { e.dev.AdamWClipped(w.dev, w.dev, w.dev, w.dev, backend.View{}, p) }, "metal: "+kAdamWClipped+": no clip state")
}

// TestOpsOptimKernelNames checks that the clip's kernels are defined in
// the embedded sources.
func TestOpsOptimKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{kGradClip, kAdamW} {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}
