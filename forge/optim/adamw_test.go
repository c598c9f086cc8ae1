package optim

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/forgeml/forge/forge"
)

//go:embed testdata/adamw.json
var adamwFixture []byte

type fixture struct {
	Config struct {
		Beta1, Beta2, Eps float64
		WeightDecay       float64 `json:"weight_decay"`
		MaxNorm           float64 `json:"max_norm"`
	}
	Order  []string
	Shapes map[string][]int
	Init   map[string][]float64
	Steps  []struct {
		LR      float64
		Grads   map[string][]float64
		Norm    float64
		Clipped bool
		Params  map[string][]float64
	}
	State map[string]struct{ M, V []float64 }
}

func f32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// relErr is |got − want| / max(|want|, 1e-3) at its worst.
func relErr(got []float32, want []float64) (worst float64, at int) {
	for i, w := range want {
		d := math.Abs(float64(got[i])-w) / math.Max(math.Abs(w), 1e-3)
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	return worst, at
}

// TestAdamWMatchesTorch replays tests/torch_optim.py: torch.optim.AdamW with
// a no-decay group for rank < 2 parameters, clip_grad_norm_(1.0) before
// each step and a changing learning rate.
func TestAdamWMatchesTorch(t *testing.T) {
	var fx fixture
	if err := json.Unmarshal(adamwFixture, &fx); err != nil {
		t.Fatal(err)
	}
	const tol = 1e-6
	params := map[string]*forge.Tensor{}
	var list []*forge.Tensor
	for _, k := range fx.Order {
		p := forge.FromSlice(f32(fx.Init[k]), fx.Shapes[k]...).RequiresGrad().SetName(k)
		params[k] = p
		list = append(list, p)
	}
	cfg := AdamWConfig{LR: 1, Beta1: fx.Config.Beta1, Beta2: fx.Config.Beta2, Eps: fx.Config.Eps, WeightDecay: fx.Config.WeightDecay}
	opt := NewAdamW(list, cfg)
	worstParam, worstNorm := 0.0, 0.0
	clipped := 0
	for s, st := range fx.Steps {
		for _, k := range fx.Order {
			params[k].SetGrad(forge.FromSlice(f32(st.Grads[k]), fx.Shapes[k]...))
		}
		norm := ClipGradNorm(list, fx.Config.MaxNorm)
		if d := math.Abs(norm-st.Norm) / st.Norm; d > worstNorm {
			worstNorm = d
		}
		if math.Abs(norm-st.Norm) > tol*st.Norm {
			t.Errorf("step %d: norm %v, torch %v", s, norm, st.Norm)
		}
		if st.Clipped {
			clipped++
			if n := GradNorm(list); math.Abs(n-fx.Config.MaxNorm) > 1e-5 {
				t.Errorf("step %d: norm after clipping %v, want ≈ %v", s, n, fx.Config.MaxNorm)
			}
		}
		opt.SetLR(st.LR)
		opt.Step()
		opt.ZeroGrad()
		for _, k := range fx.Order {
			if params[k].Grad() != nil {
				t.Fatalf("ZeroGrad left a gradient on %s", k)
			}
			d, at := relErr(params[k].Float32s(), st.Params[k])
			worstParam = math.Max(worstParam, d)
			if d > tol {
				t.Errorf("step %d %s[%d]: %v, torch %v (rel %.3g)", s, k, at, params[k].Float32s()[at], st.Params[k][at], d)
			}
		}
	}
	if clipped == 0 || clipped == len(fx.Steps) {
		t.Errorf("fixture clips at %d of %d steps; it should exercise both cases", clipped, len(fx.Steps))
	}
	if opt.StepCount() != len(fx.Steps) {
		t.Errorf("StepCount %d, want %d", opt.StepCount(), len(fx.Steps))
	}
	state := opt.State()
	worstState := 0.0
	for i, k := range fx.Order {
		if opt.Params()[i] != params[k] {
			t.Fatalf("Params()[%d] is not %s", i, k)
		}
		for _, c := range []struct {
			name string
			got  *forge.Tensor
			want []float64
		}{{"m", state.M[i], fx.State[k].M}, {"v", state.V[i], fx.State[k].V}} {
			// A moment is a running sum whose terms can cancel, and v
			// of a 3e-9 gradient is ~1e-19: compare relative to
			// max(|want|, a tenth of the tensor's largest moment), the
			// scale of the float32 rounding of the sum's terms.
			scale := 0.0
			for _, w := range c.want {
				scale = math.Max(scale, math.Abs(w))
			}
			got := c.got.Float32s()
			for j, w := range c.want {
				d := math.Abs(float64(got[j])-w) / math.Max(math.Abs(w), 0.1*scale)
				worstState = math.Max(worstState, d)
				if d > tol {
					t.Errorf("%s %s[%d]: %v, torch %v", c.name, k, j, got[j], w)
				}
			}
		}
	}
	t.Logf("worst relative difference from torch: params %.3g, norms %.3g, moments %.3g", worstParam, worstNorm, worstState)
}

// TestStepKeepsIdentity checks that Step updates parameters in place, records
// no graph, and runs its kernels in the optimizer phase.
func TestStepKeepsIdentity(t *testing.T) {
	w := forge.FromSlice([]float32{1, 2, 3, 4}, 2, 2).RequiresGrad()
	b := forge.FromSlice([]float32{0.5, -0.5}).RequiresGrad()
	view := w.Reshape(4) // shares w's memory
	loss := w.MatMul(w).Sum().Add(b.Square().Sum())
	loss.Backward()
	opt := NewAdamW([]*forge.Tensor{w, b}, DefaultAdamWConfig())
	if g := opt.Groups(); len(g) != 2 || len(g[0].Params) != 1 || g[0].Params[0] != w || g[0].WeightDecay != 0.1 ||
		len(g[1].Params) != 1 || g[1].Params[0] != b || g[1].WeightDecay != 0 {
		t.Fatalf("groups %+v: want w decayed, b not", g)
	}
	before := w.Float32s()
	phases := map[forge.Phase]int{}
	prev := forge.SetObserver(forge.Observer{Kernel: func(k forge.KernelCall) { phases[k.Phase]++ }})
	opt.Step()
	forge.SetObserver(prev)
	if phases[forge.PhaseOptimizer] == 0 || len(phases) != 1 {
		t.Errorf("Step kernels by phase: %v, want all in the optimizer phase", phases)
	}
	if !w.IsLeaf() || !b.IsLeaf() || !w.RequiresGradFlag() {
		t.Fatal("Step turned a parameter into a graph node or dropped requires_grad")
	}
	after := w.Float32s()
	for i := range after {
		// First step: |update| = lr·(1 + tiny), all signs of the gradient.
		if after[i] == before[i] {
			t.Errorf("w[%d] did not change", i)
		}
		if view.Float32s()[i] != after[i] {
			t.Errorf("a view of w does not see the update at %d", i)
		}
	}
	for _, m := range opt.State().M {
		if !m.IsLeaf() || m.RequiresGradFlag() {
			t.Error("a moment is part of a graph")
		}
	}
	// The parameters still train: a new graph through them backpropagates.
	opt.ZeroGrad()
	w.Sum().Backward()
	if w.Grad() == nil {
		t.Fatal("no gradient after Step")
	}
}

// TestStateRoundTrip resumes from a saved state and checks the next step
// matches an uninterrupted run.
func TestStateRoundTrip(t *testing.T) {
	mk := func() []*forge.Tensor {
		return []*forge.Tensor{
			forge.FromSlice([]float32{0.3, -0.2, 0.1, 0.7, -0.4, 0.9}, 2, 3).RequiresGrad(),
			forge.FromSlice([]float32{1, 1, 1}).RequiresGrad(),
		}
	}
	grads := func(step int, ps []*forge.Tensor) {
		for i, p := range ps {
			n := p.Numel()
			g := make([]float32, n)
			for j := range g {
				g[j] = float32(math.Sin(float64(step*7+i*3+j)) * 0.1)
			}
			p.SetGrad(forge.FromSlice(g, p.Shape()...))
		}
	}
	cfg := DefaultAdamWConfig()
	cfg.LR = 1e-2
	a := mk()
	optA := NewAdamW(a, cfg)
	for s := range 3 {
		grads(s, a)
		optA.Step()
	}
	// Snapshot A's state and params into fresh tensors, as a checkpoint would.
	st := optA.State()
	snap := AdamWState{Step: st.Step}
	for i := range st.M {
		snap.M = append(snap.M, forge.FromSlice(st.M[i].Float32s(), st.M[i].Shape()...))
		snap.V = append(snap.V, forge.FromSlice(st.V[i].Float32s(), st.V[i].Shape()...))
	}
	b := mk()
	forge.NoGrad(func() {
		for i := range b {
			b[i].CopyFrom(a[i])
		}
	})
	optB := NewAdamW(b, cfg)
	optB.LoadState(snap)
	for _, ps := range [][]*forge.Tensor{a, b} {
		grads(3, ps)
	}
	optA.Step()
	optB.Step()
	for i := range a {
		ga, gb := a[i].Float32s(), b[i].Float32s()
		for j := range ga {
			if ga[j] != gb[j] {
				t.Fatalf("param %d[%d]: resumed %v, uninterrupted %v", i, j, gb[j], ga[j])
			}
		}
	}
	if err := forge.Try(func() { optB.LoadState(AdamWState{M: snap.M[:1], V: snap.V}) }); err == nil {
		t.Error("LoadState accepted a state with too few moments")
	}
}

func TestConfigValidation(t *testing.T) {
	p := []*forge.Tensor{forge.Zeros(2, 2).RequiresGrad()}
	for _, cfg := range []AdamWConfig{
		{LR: 1e-3}, // zero Eps
		{LR: -1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}, // negative LR
		{LR: 1e-3, Beta1: 1, Beta2: 0.95, Eps: 1e-8}, // Beta1 = 1
		{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: math.NaN()},
	} {
		if err := forge.Try(func() { NewAdamW(p, cfg) }); err == nil {
			t.Errorf("NewAdamW accepted %+v", cfg)
		}
	}
	if err := forge.Try(func() { NewAdamW([]*forge.Tensor{p[0], p[0]}, DefaultAdamWConfig()) }); err == nil {
		t.Error("NewAdamW accepted a repeated parameter")
	}
}

func TestClipGradNorm(t *testing.T) {
	a := forge.FromSlice([]float32{3, 0}).RequiresGrad()
	b := forge.FromSlice([]float32{0, 4, 0, 0}, 2, 2).RequiresGrad()
	c := forge.FromSlice([]float32{7}).RequiresGrad() // no gradient: ignored
	a.SetGrad(forge.FromSlice([]float32{3, 0}))
	b.SetGrad(forge.FromSlice([]float32{0, 4, 0, 0}, 2, 2))
	ps := []*forge.Tensor{a, b, c}
	if n := ClipGradNorm(ps, 10); n != 5 {
		t.Fatalf("norm %v, want 5", n)
	}
	if g := a.Grad().Float32s(); g[0] != 3 {
		t.Fatalf("gradient scaled below max norm: %v", g)
	}
	if n := ClipGradNorm(ps, 1); n != 5 {
		t.Fatalf("norm %v, want 5", n)
	}
	want := float32(3 * 1 / (5 + 1e-6))
	if g := a.Grad().Float32s(); math.Abs(float64(g[0]-want)) > 1e-7 {
		t.Fatalf("clipped gradient %v, want %v", g[0], want)
	}
	if n := GradNorm(ps); math.Abs(n-1) > 1e-6 {
		t.Fatalf("norm after clipping %v, want 1", n)
	}
}

func ExampleWarmupCosine() {
	s := WarmupCosine{LR: 6e-4, MinLR: 6e-5, Warmup: 10, Total: 110}
	for _, step := range []int{0, 9, 10, 60, 110} {
		fmt.Printf("%d %.3g\n", step, s.At(step))
	}
	// Output:
	// 0 5.45e-05
	// 9 0.000545
	// 10 0.0006
	// 60 0.00033
	// 110 6e-05
}
