package train

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/safetensors"
)

// TestMoEStepMatchesPyTorch runs one training step of a tiny
// mixture-of-experts GPT (4 SwiGLU experts, top-2, aux coef 0.05) through
// Trainer.Step — the sparse dispatch, the loss with its load-balancing
// term, backward, clipping (active) and AdamW — and compares the loss,
// the routing, every gradient and every updated weight with PyTorch's
// dense computation (tests/torch_moe_step.py).
func TestMoEStepMatchesPyTorch(t *testing.T) {
	fx, err := safetensors.ReadFile("testdata/torch_moe_step.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Vocab, cfg.Model.Dim, cfg.Model.Layers, cfg.Model.Heads, cfg.Model.FFNHidden = 128, 32, 2, 2, 48
	cfg.Model.Context, cfg.Batch, cfg.GradAccum = 16, 2, 1
	cfg.Model.Experts, cfg.Model.TopK, cfg.Model.MoEAuxCoef = 4, 2, 0.05
	cfg.LR, cfg.Warmup, cfg.Schedule, cfg.GradClip = 3e-4, 0, "constant", 0.5
	cfg.Tokenizer = "char" // a BPE needs vocab ≥ 256
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's weights: hashInit by parameter index, its std by name.
	res := 0.02 / math.Sqrt(2*float64(cfg.Model.Layers))
	forge.NoGrad(func() {
		for k, p := range m.Params() {
			if p.Tensor.Dim() == 1 {
				continue
			}
			std := 0.02
			switch {
			case strings.HasSuffix(p.Name, "attn.wo.weight") || strings.HasSuffix(p.Name, "w_down.weight"):
				std = res
			case strings.HasSuffix(p.Name, "router.weight"):
				std = 0.4
			}
			p.Tensor.CopyFrom(forge.FromSlice(hashInit(k, p.Tensor.Numel(), std), p.Tensor.Shape()...))
		}
	})
	get := func(name string) safetensors.Tensor {
		tt, ok := fx.Get(name)
		if !ok {
			t.Fatalf("fixture has no %s", name)
		}
		return tt
	}
	ints := func(name string) []int32 {
		v, err := get(name).Int32s()
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

	var tokens [][]int
	if err := json.Unmarshal([]byte(fx.Metadata["tokens"]), &tokens); err != nil {
		t.Fatal(err)
	}
	if met.Router == nil || !slices.EqualFunc(met.Router.Tokens, tokens, slices.Equal) {
		t.Fatalf("routing %+v, PyTorch's tokens per expert %v", met.Router, tokens)
	}
	wantLoss, _ := strconv.ParseFloat(fx.Metadata["loss"], 64)
	wantAux, _ := strconv.ParseFloat(fx.Metadata["aux_sum"], 64)
	wantNorm, _ := strconv.ParseFloat(fx.Metadata["grad_norm"], 64)
	if rel := math.Abs(met.Loss-wantLoss) / wantLoss; rel > 1e-5 {
		t.Errorf("loss %.7f, PyTorch %.7f (rel %.1e)", met.Loss, wantLoss, rel)
	}
	if aux := met.Router.Aux * float64(cfg.Model.Layers); math.Abs(aux-wantAux) > 1e-5*wantAux {
		t.Errorf("aux loss summed over blocks %.7f, PyTorch %.7f", aux, wantAux)
	}
	if rel := math.Abs(met.GradNorm-wantNorm) / wantNorm; rel > 1e-4 {
		t.Errorf("grad norm %.6f, PyTorch %.6f (rel %.1e)", met.GradNorm, wantNorm, rel)
	}
	// As in TestStepMatchesPyTorch: gradients relative to each tensor's
	// largest value; updated weights where |clipped g| is well above eps.
	clip := math.Min(1, cfg.GradClip/(wantNorm+1e-6))
	worstG, worstW := 0.0, 0.0
	for _, p := range m.Params() {
		tg, err := get("grad." + p.Name).Float32s()
		if err != nil {
			t.Fatal(err)
		}
		tw, _ := get("updated." + p.Name).Float32s()
		g := relDiff(p.Tensor.Grad().Float32s(), tg)
		keep := make([]bool, len(tg))
		for i, v := range tg {
			keep[i] = math.Abs(float64(v))*clip > 100*cfg.Eps
		}
		w := relDiffWhere(p.Tensor.Float32s(), tw, keep)
		worstG, worstW = max(worstG, g), max(worstW, w)
		if g > 1e-4 || w > 1e-4 {
			t.Errorf("%s: gradient differs by %.1e, updated weight by %.1e (relative)", p.Name, g, w)
		}
	}
	t.Logf("loss %.7f (PyTorch %.7f), aux %.6f, grad norm %.5f (PyTorch %.5f), tokens %v; worst relative difference: gradients %.1e, updated weights %.1e",
		met.Loss, wantLoss, met.Router.Aux*float64(cfg.Model.Layers), met.GradNorm, wantNorm, tokens, worstG, worstW)
}
