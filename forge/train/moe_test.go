package train

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/gpt"
)

// A mixture-of-experts run resumes exactly (7 + 3 steps = 10 straight)
// and records its routing as metrics series, also in metrics.jsonl.
func TestMoEResumeIsExactAndRecordsRouting(t *testing.T) {
	cfg := testRunConfig()
	cfg.Model.Experts, cfg.Model.TopK = 4, 2
	whole := openTest(t, t.TempDir(), &cfg)
	if _, err := whole.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	want := losses(whole.trainer.History)
	wantRouter := whole.trainer.History.Steps[9].Router
	whole.Close()

	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := openTest(t, dir, nil)
	defer b.Close()
	if b.Config().Model.Experts != 4 {
		t.Fatalf("resumed config has %d experts, want 4", b.Config().Model.Experts)
	}
	if _, err := b.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	got := losses(b.trainer.History)
	if !slices.Equal(got, want) {
		t.Fatalf("resumed losses %v\nuninterrupted  %v", got, want)
	}
	r := b.trainer.History.Steps[9].Router
	if r == nil || wantRouter == nil || r.Aux != wantRouter.Aux || !slices.EqualFunc(r.Tokens, wantRouter.Tokens, slices.Equal) {
		t.Fatalf("step 10 routing: resumed %+v, uninterrupted %+v", r, wantRouter)
	}
	// B·T·k assignments per block and micro-batch.
	for i, blk := range r.Tokens {
		sum := 0
		for _, c := range blk {
			sum += c
		}
		if want := cfg.Batch * cfg.Model.Context * 2 * cfg.GradAccum; sum != want {
			t.Errorf("block %d: %v assignments sum to %d, want B·T·k·accum = %d", i, blk, sum, want)
		}
	}
	if r.Aux < 1 || r.LoadMax < 1 || r.LoadMin > 1 || r.LoadMin < 0 {
		t.Errorf("routing %+v: want aux ≥ 1 and loads around 1", r)
	}
	for _, name := range []string{"moe_aux", "moe_load_max", "moe_load_min"} {
		steps, values, err := b.trainer.History.Series(name)
		if err != nil || len(steps) != 10 || len(values) != 10 {
			t.Errorf("series %s: %d steps, err %v", name, len(steps), err)
		}
	}
	hist, err := readMetrics(filepath.Join(dir, MetricsFile), 10)
	if err != nil || len(hist) != 10 || hist[9].Router == nil || hist[9].Router.LoadMax != r.LoadMax {
		t.Errorf("metrics file: %d records, err %v, last routing %+v", len(hist), err, hist[len(hist)-1].Router)
	}
}

// The memory estimate counts every expert's weights and k routed copies
// of the MLP activations; against the CPU's ledger it stays a lower
// bound on what a step's forward holds, and not a loose one.
func TestMoEMemoryEstimate(t *testing.T) {
	cfg := testRunConfig()
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.FFNHidden, cfg.Model.Context = 128, 4, 256, 64
	cfg.Model.Experts, cfg.Model.TopK = 4, 2
	m := cfg.MemoryNeeded()
	if m.Weights != 4*float64(cfg.Model.Params()) {
		t.Errorf("weights %g bytes, want 4·Params = %d", m.Weights, 4*cfg.Model.Params())
	}
	k1 := cfg
	k1.Model.TopK = 1
	r := cfg.Model.Resolved()
	per := float64(cfg.Batch*r.Context*r.Layers) * 4 * float64(3*r.FFNHidden+3*r.Dim)
	if d := m.Activations - k1.MemoryNeeded().Activations; d != per {
		t.Errorf("k 1 → 2 adds %g bytes of activations, want one routed copy per token and layer, %g", d, per)
	}
	s := openTest(t, t.TempDir(), &cfg)
	defer s.Close()
	if _, err := s.TrainWith(context.Background(), 1, RunOptions{NoEval: true}); err != nil {
		t.Fatal(err)
	}
	mem := s.trainer.History.Steps[0].Memory
	held := float64(mem.ForwardPeak)
	need := m.Weights + m.Optimizer + m.Activations // one micro-batch's activations; no gradients yet
	t.Logf("forward peak %.1f MB, estimate of weights + moments + activations %.1f MB", held/1e6, need/1e6)
	if held < need || held > 2*need {
		t.Errorf("the forward's peak %.1f MB against the estimate %.1f MB: want the estimate a lower bound within 2×", held/1e6, need/1e6)
	}
}

// Export refuses a mixture of experts in one line (no transformers
// architecture holds it).
func TestMoEExportRefused(t *testing.T) {
	c := testRunConfig().Model
	c.Experts = 4
	m, err := gpt.New(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Export(m, nil, t.TempDir()); err == nil || !strings.Contains(err.Error(), "mixture of experts (n_experts 4)") {
		t.Errorf("export of a MoE model: %v", err)
	}
}

// configs/gpt-50m-moe.json is what its comment says.
func TestMoEConfigFile(t *testing.T) {
	c, err := LoadConfig("gpt-50m-moe")
	if err != nil {
		t.Fatal(err)
	}
	m := c.Model.Resolved()
	total, active := float64(m.Params())/1e6, float64(m.ActiveParams())/1e6
	if m.Experts != 8 || m.TopK != 2 || fmt.Sprintf("%.1f/%.1f", total, active) != "50.4/22.1" {
		t.Errorf("gpt-50m-moe: %d experts top-%d, %.2f M parameters, %.2f M active; the comment says 8, top-2, 50.4 M, 22.1 M", m.Experts, m.TopK, total, active)
	}
	if !strings.Contains(c.Comment, "50.4 M parameters, 22.1 M active") {
		t.Errorf("comment %q", c.Comment)
	}
}
