package train

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/safetensors"
)

// hashInit is the initialiser tests/torch_train_step.py computes too:
// element i of parameter index k is (u − 0.5)·2√3·std with u the top 24
// bits of SplitMix64(k<<32 | i) over 2^24 — exact in both languages.
func hashInit(k int, n int, std float64) []float32 {
	out := make([]float32, n)
	scale := 2 * math.Sqrt(3) * std
	for i := range out {
		x := uint64(k)<<32 | uint64(i)
		x += 0x9E3779B97F4A7C15
		x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
		x = (x ^ x>>27) * 0x94D049BB133111EB
		x ^= x >> 31
		u := float64(x>>40) / (1 << 24)
		out[i] = float32((u - 0.5) * scale)
	}
	return out
}

// hashInitModel gives m's matrices the weights tests/torch_train_step.py
// starts from (norm weights stay 1): std 0.02, the residual projections
// 0.02/√(2L).
func hashInitModel(m *gpt.Model) {
	res := 0.02 / math.Sqrt(2*float64(m.Config.Layers))
	forge.NoGrad(func() {
		for k, p := range m.Params() {
			if p.Tensor.Dim() == 1 {
				continue
			}
			std := 0.02
			if strings.HasSuffix(p.Name, "attn.wo.weight") || strings.HasSuffix(p.Name, "mlp.w_down.weight") {
				std = res
			}
			p.Tensor.CopyFrom(forge.FromSlice(hashInit(k, p.Tensor.Numel(), std), p.Tensor.Shape()...))
		}
	})
}

// fixedBatch serves the same batch every step.
type fixedBatch struct{ x, y []int32 }

func (f fixedBatch) Next() (x, y []int32) { return f.x, f.y }

// TestStepMatchesPyTorch runs one full training step of the tiny
// architecture through Trainer.Step — forward, loss, backward, clipping
// (active: the norm is 4.4, the limit 1) and AdamW — and compares the loss,
// every gradient and every updated weight with PyTorch
// (tests/torch_train_step.py, `make golden`).
func TestStepMatchesPyTorch(t *testing.T) {
	fx, err := safetensors.ReadFile("testdata/torch_step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Context, cfg.Batch = 32, 2
	cfg.LR, cfg.Warmup, cfg.Schedule = 3e-4, 0, "constant"
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	hashInitModel(m)
	ints := func(name string) []int32 {
		tt, _ := fx.Get(name)
		v, err := tt.Int32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	floats := func(name string) []float32 {
		tt, ok := fx.Get(name)
		if !ok {
			t.Fatalf("fixture has no %s", name)
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tr, err := NewTrainer(cfg, m, fixedBatch{ints("ids"), ints("targets")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	met := tr.Step()
	// The step folds the clip into AdamW and leaves the gradients
	// unscaled: they are PyTorch's gradients before clip_grad_norm_.
	grads := map[string][]float32{}
	for _, p := range m.Params() {
		grads[p.Name] = p.Tensor.Grad().Float32s()
	}

	wantLoss, _ := strconv.ParseFloat(fx.Metadata["loss"], 64)
	wantNorm, _ := strconv.ParseFloat(fx.Metadata["grad_norm"], 64)
	if rel := math.Abs(met.Loss-wantLoss) / wantLoss; rel > 1e-5 {
		t.Errorf("loss %.7f, PyTorch %.7f (rel %.1e)", met.Loss, wantLoss, rel)
	}
	if rel := math.Abs(met.GradNorm-wantNorm) / wantNorm; rel > 1e-4 {
		t.Errorf("grad norm %.6f, PyTorch %.6f (rel %.1e)", met.GradNorm, wantNorm, rel)
	}
	// Elements whose gradient is near AdamW's eps are ill-conditioned on
	// the first step (the update is lr·g/(|g|+eps)), so a last-bit
	// difference in a gradient of 1e-9 moves the weight by ~lr/2. The full
	// step is compared where |clipped g| > 100·eps; the optimizer alone is
	// then compared everywhere on PyTorch's own gradients below.
	clip := math.Min(1, cfg.GradClip/(wantNorm+1e-6))
	worstG, worstW, skipped, total := 0.0, 0.0, 0, 0
	for _, p := range m.Params() {
		// Relative to the tensor's largest value: elementwise relative
		// error is meaningless for entries near zero.
		tg := floats("grad." + p.Name)
		g := relDiff(grads[p.Name], tg)
		keep := make([]bool, len(tg))
		for i, v := range tg {
			keep[i] = math.Abs(float64(v))*clip > 100*cfg.Eps
			if !keep[i] {
				skipped++
			}
		}
		total += len(tg)
		w := relDiffWhere(p.Tensor.Float32s(), floats("updated."+p.Name), keep)
		worstG, worstW = max(worstG, g), max(worstW, w)
		if g > 1e-4 || w > 1e-4 {
			t.Errorf("%s: gradient differs by %.1e, updated weight by %.1e (relative)", p.Name, g, w)
		}
	}
	t.Logf("loss %.7f (PyTorch %.7f), grad norm %.5f (PyTorch %.5f); worst relative difference: gradients %.1e, updated weights %.1e (%d of %d elements with |g| near eps left out)",
		met.Loss, wantLoss, met.GradNorm, wantNorm, worstG, worstW, skipped, total)

	// The optimizer alone: from the same initial weights, PyTorch's
	// gradients through ClipGradNorm and AdamW must give PyTorch's weights.
	m2, _ := gpt.New(cfg.Model, 1)
	hashInitModel(m2)
	forge.NoGrad(func() {
		for _, p := range m2.Params() {
			p.Tensor.SetGrad(forge.FromSlice(floats("grad."+p.Name), p.Tensor.Shape()...))
		}
	})
	tr2, _ := NewTrainer(cfg, m2, nil, nil)
	norm2 := optim.ClipGradNorm(nn.Tensors(m2), cfg.GradClip)
	tr2.Opt.SetLR(cfg.LR)
	tr2.Opt.Step()
	worst := 0.0
	for _, p := range m2.Params() {
		w := relDiff(p.Tensor.Float32s(), floats("updated."+p.Name))
		worst = max(worst, w)
		if w > 1e-5 {
			t.Errorf("optimizer on PyTorch's gradients: %s differs by %.1e", p.Name, w)
		}
	}
	t.Logf("optimizer alone on PyTorch's gradients: norm %.6f, worst relative weight difference %.1e", norm2, worst)
}

func relDiffWhere(got, want []float32, keep []bool) float64 {
	scale, worst := 0.0, 0.0
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
		if keep[i] {
			worst = max(worst, math.Abs(float64(got[i]-want[i])))
		}
	}
	if scale == 0 {
		return worst
	}
	return worst / scale
}

func relDiff(got, want []float32) float64 {
	scale, worst := 0.0, 0.0
	for i := range want {
		scale = max(scale, math.Abs(float64(want[i])))
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if scale == 0 {
		return worst
	}
	return worst / scale
}
