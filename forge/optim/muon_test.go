package optim

import (
	_ "embed"
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge"
)

//go:embed testdata/muon.json
var muonFixture []byte

type muonFixtureT struct {
	Config struct {
		LR              float64 `json:"lr"`
		MuonLR          float64 `json:"muon_lr"`
		Momentum        float64 `json:"momentum"`
		NSSteps         int     `json:"ns_steps"`
		NSEps           float64 `json:"ns_eps"`
		MuonWeightDecay float64 `json:"muon_weight_decay"`
		WeightDecay     float64 `json:"weight_decay"`
		Beta1, Beta2    float64
		Eps             float64
		MaxNorm         float64 `json:"max_norm"`
	}
	Order  []string
	Muon   []string
	Shapes map[string][]int
	Init   map[string][]float64
	Steps  []struct {
		LR      float64
		Grads   map[string][]float64
		Norm    float64
		Clipped bool
		Params  map[string][]float64
	}
	Momentum map[string][]float64
	Moments  map[string]struct{ M, V []float64 }
}

// tensorOf makes a tensor of dtype dt from float64 values.
func tensorOf(dt forge.DType, v []float64, shape ...int) *forge.Tensor {
	return forge.FromSlice(slices.Clone(v), shape...).Cast(dt)
}

// absErr is max |got − want| / scale, scale the largest |want| (at least 1e-3).
func absErr(got, want []float64) float64 {
	scale := 1e-3
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	worst := 0.0
	for i, w := range want {
		d := math.Abs(got[i]-w) / scale
		if d > worst || math.IsNaN(d) {
			worst = d
		}
	}
	return worst
}

// TestMuonMatchesTorch replays tests/torch_muon.py (a float64 Muon written
// from the published algorithm, beside torch.optim.AdamW for the other
// group), with the trainer's deferred clip (ClipGradNormDeferred,
// StepClipped).
//
// Tolerances: in float64 the only differences are the order of sums
// (‖U‖_F, the matmuls), ~1e-16 relative, grown by the five Newton–Schulz
// steps (the polynomial's slope is at most |a| ≈ 3.4 per step: ≤ 3.4⁵ ≈
// 450) — 1e-11 relative to each tensor's scale is ample. In float32 the
// same growth on 6e-8 rounding gives ~3e-5 relative error in the
// orthogonalised update, of which lr·√2 ≈ 0.03 reaches the weights over a
// few steps, plus AdamW's float32 rounding (1e-6 relative, see
// TestAdamWMatchesTorch): 2e-6 relative to the tensor's scale.
func TestMuonMatchesTorch(t *testing.T) {
	var fx muonFixtureT
	if err := json.Unmarshal(muonFixture, &fx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dt  forge.DType
		tol float64
	}{{forge.Float64, 1e-11}, {forge.Float32, 2e-6}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			params := map[string]*forge.Tensor{}
			var list []*forge.Tensor
			for _, k := range fx.Order {
				p := tensorOf(tc.dt, fx.Init[k], fx.Shapes[k]...).RequiresGrad().SetName(k)
				params[k] = p
				list = append(list, p)
			}
			c := fx.Config
			cfg := MuonConfig{LR: c.MuonLR, Momentum: c.Momentum, Nesterov: true, NSSteps: c.NSSteps, Eps: c.NSEps,
				WeightDecay: c.MuonWeightDecay,
				AdamW:       AdamWConfig{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}}
			opt := NewMuon(list, cfg)
			if got := names(opt.MuonParams()); !slices.Equal(got, fx.Muon) {
				t.Fatalf("Muon group %v, want %v", got, fx.Muon)
			}
			worst := 0.0
			clipped := 0
			for s, st := range fx.Steps {
				for _, k := range fx.Order {
					params[k].SetGrad(tensorOf(tc.dt, st.Grads[k], fx.Shapes[k]...))
				}
				clip := ClipGradNormDeferred(list, c.MaxNorm)
				opt.SetLR(st.LR)
				opt.StepClipped(clip)
				if math.Abs(clip.Norm()-st.Norm) > 1e-6*st.Norm {
					t.Errorf("step %d: norm %v, torch %v", s, clip.Norm(), st.Norm)
				}
				if st.Clipped {
					clipped++
				}
				for _, k := range fx.Order {
					d := absErr(params[k].Float64s(), st.Params[k])
					worst = math.Max(worst, d)
					if d > tc.tol {
						t.Errorf("step %d %s: worst difference %.3g of its scale (tolerance %.0e)", s, k, d, tc.tol)
					}
				}
			}
			if clipped == 0 || clipped == len(fx.Steps) {
				t.Errorf("fixture clips at %d of %d steps; it should exercise both cases", clipped, len(fx.Steps))
			}
			if opt.StepCount() != len(fx.Steps) {
				t.Errorf("StepCount %d, want %d", opt.StepCount(), len(fx.Steps))
			}
			st := opt.State()
			for i, k := range fx.Muon {
				d := absErr(st.Momentum[i].Float64s(), fx.Momentum[k])
				worst = math.Max(worst, d)
				if d > tc.tol {
					t.Errorf("momentum %s: worst difference %.3g", k, d)
				}
			}
			for i, p := range opt.AdamW().Params() {
				want := fx.Moments[p.Name()]
				for _, u := range []struct {
					got  *forge.Tensor
					want []float64
				}{{st.AdamW.M[i], want.M}, {st.AdamW.V[i], want.V}} {
					if d := absErr(u.got.Float64s(), u.want); d > tc.tol {
						t.Errorf("AdamW moment of %s: worst difference %.3g", p.Name(), d)
					}
				}
			}
			t.Logf("%v: worst difference from the float64 reference %.3g of the tensor's scale", tc.dt, worst)
		})
	}
}

// symEig returns the eigenvalues of the symmetric n×n matrix a (row-major)
// by cyclic Jacobi rotations, a host-side oracle for the tests.
func symEig(a []float64, n int) []float64 {
	a = slices.Clone(a)
	for sweep := 0; sweep < 100; sweep++ {
		off := 0.0
		for i := range n {
			for j := range n {
				if i != j {
					off += a[i*n+j] * a[i*n+j]
				}
			}
		}
		if off < 1e-30 {
			break
		}
		for p := 0; p < n; p++ {
			for q := p + 1; q < n; q++ {
				if math.Abs(a[p*n+q]) < 1e-300 {
					continue
				}
				theta := (a[q*n+q] - a[p*n+p]) / (2 * a[p*n+q])
				tt := math.Copysign(1, theta) / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				c := 1 / math.Sqrt(tt*tt+1)
				s := tt * c
				for k := range n { // columns p, q
					akp, akq := a[k*n+p], a[k*n+q]
					a[k*n+p], a[k*n+q] = c*akp-s*akq, s*akp+c*akq
				}
				for k := range n { // rows p, q
					apk, aqk := a[p*n+k], a[q*n+k]
					a[p*n+k], a[q*n+k] = c*apk-s*aqk, s*apk+c*aqk
				}
			}
		}
	}
	ev := make([]float64, n)
	for i := range n {
		ev[i] = a[i*n+i]
	}
	slices.Sort(ev)
	return ev
}

// TestNewtonSchulzSingularValues checks the iteration in float64 against
// what it is: a polynomial applied to the singular values, keeping the
// singular vectors. A rectangular diagonal input must come out diagonal
// with each entry the scalar iteration x ← a·x + b·x³ + c·x⁵ from
// x₀ = s/‖s‖ (to rounding); for Gaussian matrices, wide and tall, every
// singular value of the output must lie in the quintic's band around 1
// ([0.6, 1.25]: the coefficients trade convergence for speed) and O·Uᵀ
// (wide) or Uᵀ·O (tall) must be symmetric, as it is when O shares U's
// singular vectors.
func TestNewtonSchulzSingularValues(t *testing.T) {
	const eps = 1e-7
	// Diagonal (3, 5): singular values 2, 0.5, 0.01 spread over 200×.
	s := []float64{2, 0.5, 0.01}
	d := make([]float64, 15)
	for i, v := range s {
		d[i*5+i] = v
	}
	var out []float64
	forge.NoGrad(func() { out = NewtonSchulz(forge.FromSlice(d, 3, 5), 5, eps).Float64s() })
	norm := math.Sqrt(4 + 0.25 + 1e-4)
	for i, v := range s {
		x := v / (norm + eps)
		for range 5 {
			x = NSCoefA*x + NSCoefB*x*x*x + NSCoefC*x*x*x*x*x
		}
		if got := out[i*5+i]; math.Abs(got-x) > 1e-13 {
			t.Errorf("diagonal %d (s = %v): %v, scalar iteration %v", i, v, got, x)
		}
	}
	for i, v := range out {
		if i%6 != 0 && v != 0 {
			t.Errorf("off-diagonal element %d is %v, want 0", i, v)
		}
	}

	gen := forge.NewGenerator(7)
	for _, shape := range [][2]int{{16, 48}, {48, 16}, {32, 32}} {
		r, c := shape[0], shape[1]
		u := gen.Randn(forge.Float64, r, c)
		var o, sym, gram []float64
		forge.NoGrad(func() {
			ot := NewtonSchulz(u, 5, eps)
			o = ot.Float64s()
			if r <= c {
				sym = ot.MatMul(u.T()).Float64s()   // (r, r)
				gram = ot.MatMul(ot.T()).Float64s() // (r, r)
			} else {
				sym = u.T().MatMul(ot).Float64s()   // (c, c)
				gram = ot.T().MatMul(ot).Float64s() // (c, c)
			}
		})
		_ = o
		n := min(r, c)
		worstSym := 0.0
		for i := range n {
			for j := range n {
				worstSym = math.Max(worstSym, math.Abs(sym[i*n+j]-sym[j*n+i]))
			}
		}
		if worstSym > 1e-10 {
			t.Errorf("%dx%d: O and U do not share singular vectors: asymmetry %.3g", r, c, worstSym)
		}
		ev := symEig(gram, n)
		lo, hi := math.Sqrt(max(ev[0], 0)), math.Sqrt(ev[n-1])
		if lo < 0.6 || hi > 1.25 {
			t.Errorf("%dx%d: singular values of the output in [%.4f, %.4f], want within [0.6, 1.25]", r, c, lo, hi)
		}
		t.Logf("%dx%d: singular values in [%.4f, %.4f], asymmetry %.2g", r, c, lo, hi, worstSym)
	}
}

// TestMuonSkipsNonFinite: a clip over a NaN gradient skips the whole step
// — Muon group, AdamW group, momenta and the step count — on the device.
func TestMuonSkipsNonFinite(t *testing.T) {
	gen := forge.NewGenerator(3)
	w := gen.Randn(forge.Float32, 6, 4).RequiresGrad().SetName("blocks.0.attn.wo.weight")
	e := gen.Randn(forge.Float32, 5, 4).RequiresGrad().SetName("wte.weight")
	list := []*forge.Tensor{w, e}
	opt := NewMuon(list, DefaultMuonConfig())
	step := func(bad bool) {
		gw := gen.Randn(forge.Float32, 6, 4)
		if bad {
			gw = gw.Div(forge.Zeros(6, 4)) // ±Inf and NaN
		}
		w.SetGrad(gw)
		e.SetGrad(gen.Randn(forge.Float32, 5, 4))
		opt.StepClipped(ClipGradNormDeferred(list, 1))
	}
	step(false)
	before := [][]float32{w.Float32s(), e.Float32s(), opt.State().Momentum[0].Float32s()}
	step(true)
	after := [][]float32{w.Float32s(), e.Float32s(), opt.State().Momentum[0].Float32s()}
	for i := range before {
		if !slices.Equal(before[i], after[i]) {
			t.Errorf("tensor %d changed in a skipped step", i)
		}
	}
	if opt.StepCount() != 1 {
		t.Errorf("StepCount %d after one good and one skipped step, want 1", opt.StepCount())
	}
	step(false)
	if opt.StepCount() != 2 || slices.Equal(before[0], w.Float32s()) {
		t.Errorf("the step after a skipped one did not update (step count %d)", opt.StepCount())
	}
}

// TestMuonClipEqualsClippedGrads: the deferred clip's coefficient reaches
// the Muon group — StepClipped equals clipping the gradients in place and
// Step — and a gradient that is not clipped gives the same update (the
// normalisation makes the Muon update scale-free, so only the momentum's
// mix of steps shows the coefficient: two steps are compared).
func TestMuonClipEqualsClippedGrads(t *testing.T) {
	run := func(deferred bool) []float32 {
		gen := forge.NewGenerator(11)
		w := gen.Randn(forge.Float32, 8, 4).RequiresGrad().SetName("blocks.0.mlp.w_up.weight")
		opt := NewMuon([]*forge.Tensor{w}, DefaultMuonConfig())
		for _, scale := range []float64{5, 0.1} { // clipped, then not
			w.SetGrad(gen.Randn(forge.Float32, 8, 4).MulScalar(scale))
			if deferred {
				opt.StepClipped(ClipGradNormDeferred([]*forge.Tensor{w}, 1))
			} else {
				ClipGradNorm([]*forge.Tensor{w}, 1)
				opt.Step()
			}
		}
		return w.Float32s()
	}
	a, b := run(true), run(false)
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(float64(a[i]-b[i])))
	}
	// The two differ only in how the coefficient is rounded into the
	// gradient (float32 product either way): a few ulps of the weights.
	if worst > 1e-6 {
		t.Errorf("StepClipped and ClipGradNorm+Step differ by %.3g", worst)
	}
}

// TestMuonGroupsAndConfig: the default rule, the listing and the
// learning-rate coupling.
func TestMuonGroupsAndConfig(t *testing.T) {
	mk := func(name string, shape ...int) *forge.Tensor {
		return forge.Zeros(shape...).RequiresGrad().SetName(name)
	}
	ps := []*forge.Tensor{
		mk("wte.weight", 10, 4), mk("blocks.0.norm1.weight", 4), mk("blocks.0.attn.wqkv.weight", 12, 4),
		mk("blocks.0.attn.wqkv.bias", 12), mk("blocks.0.mlp.w_down.weight", 4, 8), mk("head.weight", 10, 4),
	}
	opt := NewMuon(ps, DefaultMuonConfig())
	groups := opt.Describe()
	want := []struct {
		opt   string
		names []string
		wd    float64
	}{
		{"muon", []string{"blocks.0.attn.wqkv.weight", "blocks.0.mlp.w_down.weight"}, 0},
		{"adamw", []string{"wte.weight", "head.weight"}, 0.1},
		{"adamw", []string{"blocks.0.norm1.weight", "blocks.0.attn.wqkv.bias"}, 0},
	}
	if len(groups) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(groups), len(want), groups)
	}
	for i, w := range want {
		g := groups[i]
		if g.Optimizer != w.opt || !slices.Equal(g.Params, w.names) || g.WeightDecay != w.wd {
			t.Errorf("group %d: %+v, want %s %v wd %v", i, g, w.opt, w.names, w.wd)
		}
	}
	opt.SetLR(3e-5) // a tenth of DefaultAdamWConfig's 3e-4
	if math.Abs(opt.MuonLR()-0.002) > 1e-15 || opt.LR() != 3e-5 || opt.Describe()[0].LR != opt.MuonLR() {
		t.Errorf("SetLR(3e-5): Muon lr %v (want 0.002), AdamW lr %v", opt.MuonLR(), opt.LR())
	}
	for _, bad := range []func(*MuonConfig){
		func(c *MuonConfig) { c.Momentum = 1 },
		func(c *MuonConfig) { c.NSSteps = 0 },
		func(c *MuonConfig) { c.Eps = 0 },
		func(c *MuonConfig) { c.LR = math.NaN() },
		func(c *MuonConfig) { c.AdamW.LR = 0 },
	} {
		c := DefaultMuonConfig()
		bad(&c)
		if err := forge.Try(func() { NewMuon(ps, c) }); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	if err := forge.Try(func() { NewMuonWith([]*forge.Tensor{ps[1]}, nil, DefaultMuonConfig()) }); err == nil {
		t.Error("a 1-D parameter in the Muon group was accepted")
	}
}

// TestMuonDeviceParity: one clipped Muon step (both groups) on another
// device equals the CPU's — FORGE_MUON_PARITY_DEVICE names it, metal-emu
// by default (the Metal kernels run by the emulator; skipped where it is
// unavailable). The emulated kernels sum in another order than the CPU's
// BLAS, ~1e-7 relative per matmul, grown at most ~450× by five
// Newton–Schulz steps (see TestMuonMatchesTorch): 1e-4 of the update,
// times lr·scale ≈ 0.03 on weights of scale ~1: 1e-5.
func TestMuonDeviceParity(t *testing.T) {
	if testing.Short() {
		t.Skip("opens the Metal emulator")
	}
	name := "metal-emu"
	if n := os.Getenv("FORGE_MUON_PARITY_DEVICE"); n != "" {
		name = n
	}
	dev, err := forge.OpenDevice(name)
	if err != nil {
		t.Skipf("%s: %v", name, err)
	}
	run := func(d *forge.Device) [][]float32 {
		gen := forge.NewGenerator(5)
		mk := func(name string, shape ...int) *forge.Tensor {
			return gen.Randn(forge.Float32, shape...).To(d).RequiresGrad().SetName(name)
		}
		ps := []*forge.Tensor{mk("blocks.0.attn.wqkv.weight", 48, 16), mk("blocks.0.mlp.w_down.weight", 16, 40),
			mk("wte.weight", 64, 16), mk("blocks.0.norm1.weight", 16)}
		opt := NewMuon(ps, DefaultMuonConfig())
		for range 2 {
			for _, p := range ps {
				p.SetGrad(gen.Randn(forge.Float32, p.Shape()...).MulScalar(0.5).To(d))
			}
			opt.StepClipped(ClipGradNormDeferred(ps, 1))
		}
		var out [][]float32
		for _, p := range ps {
			out = append(out, p.Float32s())
		}
		return append(out, opt.State().Momentum[0].Float32s())
	}
	cpu, err := forge.OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	want, got := run(cpu), run(dev)
	worst := 0.0
	for i := range want {
		for j := range want[i] {
			worst = math.Max(worst, math.Abs(float64(got[i][j]-want[i][j])))
		}
	}
	t.Logf("%s vs cpu after two Muon steps: worst difference %.3g", name, worst)
	if worst > 1e-5 {
		t.Errorf("%s differs from the cpu by %.3g", name, worst)
	}
}
