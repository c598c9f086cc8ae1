package optim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge"
)

// clipRun is one optimizer over freshly made parameters: the same values
// for every run of a seed.
type clipRun struct {
	params []*forge.Tensor
	opt    *AdamW
}

// newClipRun makes parameters of mixed ranks (and, with mixed, one float64
// parameter, so that the gradients span two dtypes) and an AdamW over them.
func newClipRun(seed uint64, mixed bool) *clipRun {
	rng := rand.New(rand.NewPCG(seed, 7))
	vals := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	var ps []*forge.Tensor
	for _, sh := range [][]int{{37, 23}, {23}, {5, 3000}, {11}} {
		n := 1
		for _, d := range sh {
			n *= d
		}
		ps = append(ps, forge.FromSlice(vals(n, 0.1), sh...).RequiresGrad())
	}
	if mixed {
		v := vals(50, 0.1)
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		ps = append(ps, forge.FromSlice(f, 5, 10).RequiresGrad())
	}
	return &clipRun{params: ps, opt: NewAdamW(ps, DefaultAdamWConfig())}
}

// setGrads gives every parameter a gradient drawn from seed, scaled by
// scale; poison puts a NaN or an Inf into one of them.
func (r *clipRun) setGrads(seed uint64, scale float64, poison float64) {
	rng := rand.New(rand.NewPCG(seed, 9))
	forge.NoGrad(func() {
		for k, p := range r.params {
			n := p.Numel()
			if p.DType() == forge.Float64 {
				g := make([]float64, n)
				for i := range g {
					g[i] = rng.NormFloat64() * scale
				}
				p.SetGrad(forge.FromSlice(g, p.Shape()...))
				continue
			}
			g := make([]float32, n)
			for i := range g {
				g[i] = float32(rng.NormFloat64() * scale)
			}
			if k == 2 && poison != 0 {
				g[17] = float32(poison)
			}
			p.SetGrad(forge.FromSlice(g, p.Shape()...))
		}
	})
}

// state returns the parameters and moments as float64 bits.
func (r *clipRun) state() [][]float64 {
	var out [][]float64
	st := r.opt.State()
	for i, p := range r.params {
		out = append(out, p.Float64s(), st.M[i].Float64s(), st.V[i].Float64s())
	}
	return out
}

// TestDeferredClipMatchesClipGradNorm checks the device-side clip (the
// norm and coefficient computed by GradClip, folded into AdamWClipped)
// against the host-side path it replaces — ClipGradNorm scaling the
// gradients in place, then Step — over steps with the clip active,
// inactive, disabled (max norm 0) and skipped (a NaN or an Inf in a
// gradient): the norms, the step counts, the parameters and both moments
// must be equal bit for bit, on one dtype (the device path) and on two
// (the host path).
func TestDeferredClipMatchesClipGradNorm(t *testing.T) {
	type step struct {
		scale, maxNorm, poison float64
	}
	steps := []step{
		{1, 1, 0},           // norm ≈ 130: clipped
		{1e-3, 1, 0},        // norm ≈ 0.13: not clipped
		{1, 0, 0},           // no clipping at all
		{1, 1, math.NaN()},  // skipped
		{1, 1, math.Inf(1)}, // skipped
		{0.05, 5, 0},        // clipped again after the skips
		{0.05, 100, 0},      // not clipped
	}
	for _, mixed := range []bool{false, true} {
		ref, got := newClipRun(1, mixed), newClipRun(1, mixed)
		for i, s := range steps {
			ref.setGrads(uint64(10+i), s.scale, s.poison)
			got.setGrads(uint64(10+i), s.scale, s.poison)
			// The reference: the host-side clip of the trainer before.
			wantNorm := hostClip(ref.params, s.maxNorm)
			wantSkip := math.IsNaN(wantNorm) || math.IsInf(wantNorm, 0)
			if !wantSkip {
				ref.opt.Step()
			}
			c := ClipGradNormDeferred(got.params, s.maxNorm)
			got.opt.StepClipped(c)
			norm, skip := c.Norm(), c.Skipped()
			if math.Float64bits(norm) != math.Float64bits(wantNorm) && !(math.IsNaN(norm) && math.IsNaN(wantNorm)) {
				t.Errorf("mixed=%v step %d: norm %v, ClipGradNorm gives %v", mixed, i, norm, wantNorm)
			}
			if skip != wantSkip {
				t.Errorf("mixed=%v step %d: skipped %v, want %v", mixed, i, skip, wantSkip)
			}
			if g, w := got.opt.StepCount(), ref.opt.StepCount(); g != w {
				t.Errorf("mixed=%v step %d: step count %d, want %d", mixed, i, g, w)
			}
			if want := s.maxNorm > 0 && !wantSkip && s.maxNorm/(wantNorm+1e-6) < 1; want != (c.Coef() < 1) {
				t.Errorf("mixed=%v step %d: coefficient %v (norm %v, max %v)", mixed, i, c.Coef(), norm, s.maxNorm)
			}
			gs, ws := got.state(), ref.state()
			for k := range ws {
				for j := range ws[k] {
					if math.Float64bits(gs[k][j]) != math.Float64bits(ws[k][j]) {
						t.Fatalf("mixed=%v step %d: tensor %d (param %d, %s) element %d: %v, ClipGradNorm+Step gives %v",
							mixed, i, k, k/3, [3]string{"weight", "m", "v"}[k%3], j, gs[k][j], ws[k][j])
					}
				}
			}
		}
		t.Logf("mixed=%v: %d steps bit-identical to ClipGradNorm + Step", mixed, len(steps))
	}
}

// hostClip is the clip written out on the host, independently of the
// package's: the norm from GradNorm and, when it is finite and above
// maxNorm > 0, every gradient scaled in place by maxNorm/(norm + 1e-6).
func hostClip(params []*forge.Tensor, maxNorm float64) float64 {
	norm := GradNorm(params)
	if math.IsNaN(norm) || math.IsInf(norm, 0) || maxNorm == 0 {
		return norm
	}
	if coef := maxNorm / (norm + 1e-6); coef < 1 {
		forge.NoGrad(func() {
			for _, p := range params {
				p.Grad().MulScalarInPlace(coef)
			}
		})
	}
	return norm
}

// TestClipGradNormMatchesHost checks ClipGradNorm (the package's one
// clipping rule, run through forge.GradClip) against hostClip: the norms
// and the scaled gradients bit for bit, clipped and not.
func TestClipGradNormMatchesHost(t *testing.T) {
	for _, scale := range []float64{0.05, 1, 100} {
		ref, got := newClipRun(2, true), newClipRun(2, true)
		ref.setGrads(5, scale, 0)
		got.setGrads(5, scale, 0)
		wantNorm, norm := hostClip(ref.params, 1), ClipGradNorm(got.params, 1)
		if math.Float64bits(norm) != math.Float64bits(wantNorm) {
			t.Errorf("scale %v: norm %v, want %v", scale, norm, wantNorm)
		}
		for k := range ref.params {
			w, g := ref.params[k].Grad().Float64s(), got.params[k].Grad().Float64s()
			for j := range w {
				if math.Float64bits(g[j]) != math.Float64bits(w[j]) {
					t.Fatalf("scale %v: gradient %d element %d: %v, want %v", scale, k, j, g[j], w[j])
				}
			}
		}
	}
}

// TestScaledClipMatchesUnscaled checks the loss-scaled clip: gradients
// times 2¹⁶ clipped by ClipGradNormDeferredScaled give the norm, skip flag
// and update (parameters, moments) of the unscaled gradients clipped by
// ClipGradNormDeferred, bit for bit, and the gradients keep their scaled
// values.
func TestScaledClipMatchesUnscaled(t *testing.T) {
	const ls = 0x1p16
	for _, s := range []struct{ scale, maxNorm, poison float64 }{
		{1, 1, 0}, {0.001, 1, 0}, {1, 0, 0}, {1, 1, math.NaN()},
	} {
		ref, got := newClipRun(3, false), newClipRun(3, false)
		ref.setGrads(6, s.scale, s.poison)
		got.setGrads(6, s.scale*ls, s.poison)
		want := ClipGradNormDeferred(ref.params, s.maxNorm)
		ref.opt.StepClipped(want)
		c := ClipGradNormDeferredScaled(got.params, s.maxNorm, ls)
		got.opt.StepClipped(c)
		if math.Float64bits(c.Norm()) != math.Float64bits(want.Norm()) && !math.IsNaN(want.Norm()) {
			t.Errorf("%+v: norm %v, unscaled %v", s, c.Norm(), want.Norm())
		}
		if c.Skipped() != want.Skipped() {
			t.Errorf("%+v: skipped %v, unscaled %v", s, c.Skipped(), want.Skipped())
		}
		if !want.Skipped() && c.Coef() != want.Coef()/ls {
			t.Errorf("%+v: coefficient %v, want %v/2¹⁶", s, c.Coef(), want.Coef())
		}
		gs, ws := got.state(), ref.state()
		for k := range ws {
			for j := range ws[k] {
				if math.Float64bits(gs[k][j]) != math.Float64bits(ws[k][j]) {
					t.Fatalf("%+v: tensor %d element %d: %v, unscaled gives %v", s, k, j, gs[k][j], ws[k][j])
				}
			}
		}
		if g, w := got.params[0].Grad().Float64s()[3], ref.params[0].Grad().Float64s()[3]; g != w*ls {
			t.Errorf("%+v: gradient %v, want the scaled %v", s, g, w*ls)
		}
	}
	if err := forge.Try(func() { ClipGradNormDeferredScaled(nil, 1, 0) }); err == nil {
		t.Error("a zero loss scale was accepted")
	}
}

// TestDeferredClipLeavesGradients checks that the deferred clip scales
// the update, not the gradients, and that a clip over no gradient is a
// zero norm.
func TestDeferredClipLeavesGradients(t *testing.T) {
	r := newClipRun(3, false)
	r.setGrads(4, 1, 0)
	before := r.params[0].Grad().Float32s()
	c := ClipGradNormDeferred(r.params, 1)
	r.opt.StepClipped(c)
	if c.Coef() >= 1 {
		t.Fatalf("coefficient %v: the test wants an active clip", c.Coef())
	}
	after := r.params[0].Grad().Float32s()
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("gradient element %d changed from %v to %v", i, before[i], after[i])
		}
	}
	if n := ClipGradNormDeferred(nil, 1).Norm(); n != 0 {
		t.Errorf("norm of no gradients %v", n)
	}
	if err := forge.Try(func() { ClipGradNormDeferred(r.params, -1) }); err == nil {
		t.Error("a negative max norm was accepted")
	}
}
