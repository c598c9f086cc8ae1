package train

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/configs"
	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/safetensors"
)

func muonRunConfig() Config {
	c := testRunConfig()
	c.Optimizer, c.MuonLR = "muon", 0.03
	c.MuonWeightDecay = 0.01 // exercised by the resume
	return c
}

// TestMuonResumeIsExact: a Muon run saved at step 7 and resumed for 3 more
// steps has the losses and the final weights of an uninterrupted 10-step
// run, bit for bit (its momenta are in the checkpoint), and the
// checkpoint says which optimizer wrote it.
func TestMuonResumeIsExact(t *testing.T) {
	cfg := muonRunConfig()
	whole := openTest(t, t.TempDir(), &cfg)
	if _, err := whole.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	want := losses(whole.trainer.History)
	var wantW [][]float32
	for _, p := range whole.model.Params() {
		wantW = append(wantW, p.Tensor.Float32s())
	}
	if _, ok := whole.trainer.Opt.(*optim.Muon); !ok {
		t.Fatalf("optimizer %T, want *optim.Muon", whole.trainer.Opt)
	}
	whole.Close()

	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	a.Close()
	latest, err := os.ReadFile(filepath.Join(dir, LatestFile))
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, "checkpoints", strings.TrimSpace(string(latest)), optimFile))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["optimizer"] != "muon" {
		t.Errorf("optim.safetensors metadata %v, want optimizer muon", f.Metadata)
	}
	if _, ok := f.Get("momentum.blocks.0.attn.wqkv.weight"); !ok {
		t.Error("no momentum of blocks.0.attn.wqkv.weight in the checkpoint")
	}
	if _, ok := f.Get("v.blocks.0.attn.wqkv.weight"); ok {
		t.Error("a Muon parameter has an AdamW second moment in the checkpoint")
	}

	b := openTest(t, dir, nil)
	defer b.Close()
	if !b.Resumed() || b.trainer.StepCount() != 7 {
		t.Fatalf("resumed at step %d", b.trainer.StepCount())
	}
	if _, err := b.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	got := losses(b.trainer.History)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: resumed loss %v, uninterrupted %v", i+1, got[i], want[i])
		}
	}
	for i, p := range b.model.Params() {
		if !slices.Equal(p.Tensor.Float32s(), wantW[i]) {
			t.Fatalf("after resume, %s differs from the uninterrupted run", p.Name)
		}
	}
}

// TestResumeRefusesOtherOptimizer: a checkpoint of an AdamW run does not
// load into a Muon trainer (its moments would silently be misread), and
// the error says why.
func TestResumeRefusesOtherOptimizer(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	a.Close()
	mc := cfg
	mc.Optimizer = "muon"
	_, err := Open(dir, OpenOptions{Config: &mc, Texts: testTexts(), Source: "test", NoCache: true})
	if err == nil || !strings.Contains(err.Error(), `optimizer "adamw", but the run's config says "muon"`) {
		t.Fatalf("opening an AdamW checkpoint with optimizer muon: %v", err)
	}
}

// TestMuonOverfitsOneBatch: Muon drives the `tiny` config's loss on one
// fixed batch towards zero through the Trainer (clip, schedule).
func TestMuonOverfitsOneBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("trains tiny for up to 100 steps")
	}
	b, err := configs.Get("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer, cfg.Batch, cfg.Warmup, cfg.Schedule, cfg.LR = "muon", 4, 5, "constant", 3e-3
	cfg.Model.Context, cfg.Model.Dropout = 64, 0
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := forge.NewGenerator(2)
	x := g.RandInt(0, cfg.Model.Vocab, cfg.Batch, 65).Int32s()
	var xs, ys []int32
	for r := range cfg.Batch {
		xs = append(xs, x[r*65:r*65+64]...)
		ys = append(ys, x[r*65+1:r*65+65]...)
	}
	tr, err := NewTrainer(cfg, m, fixedBatch{xs, ys}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var met Metrics
	first := math.NaN()
	for range 100 {
		met = tr.Step()
		if math.IsNaN(first) {
			first = met.Loss
		}
		if met.Loss < 0.05 {
			break
		}
	}
	t.Logf("Muon on tiny, one batch: loss %.4f → %.4f in %d steps", first, met.Loss, met.Step)
	if met.Loss >= 0.05 {
		t.Errorf("loss %.4f after %d steps, want < 0.05", met.Loss, met.Step)
	}
}

// TestMuonConfig: the optimizer fields' defaults, their validation (one
// line naming each bad value) and the groups the trainer's Muon gets.
func TestMuonConfig(t *testing.T) {
	for _, c := range []struct {
		json, want string
	}{
		{`{"optimizer": "sgd"}`, `optimizer "sgd": want "adamw" or "muon"`},
		{`{"muon_lr": 0.01}`, `muon_* fields are set but the optimizer is "adamw"`},
		{`{"optimizer": "muon", "muon_lr": -1}`, `muon_lr -1: want a finite value > 0`},
		{`{"optimizer": "muon", "muon_momentum": 1}`, `muon_momentum 1: want 0 < μ < 1`},
		{`{"optimizer": "muon", "muon_ns_steps": -2}`, `muon_ns_steps -2: want 1..100`},
		{`{"optimizer": "muon", "muon_weight_decay": -0.1}`, `muon_weight_decay -0.1: want a finite value >= 0`},
	} {
		_, err := ParseConfig([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q", c.json, err, c.want)
		}
	}
	cfg, err := ParseConfig([]byte(`{"optimizer": "muon", "lr": 0.001}`))
	if err != nil {
		t.Fatal(err)
	}
	mc := cfg.Muon()
	if mc.LR != 0.02 || mc.Momentum != 0.95 || mc.NSSteps != 5 || !mc.Nesterov || mc.WeightDecay != 0 || mc.AdamW.LR != 0.001 {
		t.Errorf("Muon() %+v: want the defaults", mc)
	}
	cfg.Model = testRunConfig().Model
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(cfg, m, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	groups := tr.Opt.Describe()
	if len(groups) < 2 || groups[0].Optimizer != "muon" {
		t.Fatalf("groups %+v", groups)
	}
	var muon []string
	for _, p := range m.Params() {
		if strings.HasPrefix(p.Name, "blocks.") && p.Tensor.Dim() == 2 {
			muon = append(muon, p.Name)
		}
	}
	if !slices.Equal(groups[0].Params, muon) {
		t.Errorf("Muon group %v, want the blocks' matrices %v", groups[0].Params, muon)
	}
	for _, g := range groups[1:] {
		if g.Optimizer != "adamw" || slices.ContainsFunc(g.Params, func(n string) bool { return slices.Contains(muon, n) }) {
			t.Errorf("AdamW group %+v", g)
		}
	}
	// The Muon group's lr follows the schedule in proportion.
	tr.Opt.SetLR(0.0005)
	if mu := tr.Opt.(*optim.Muon).MuonLR(); math.Abs(mu-0.01) > 1e-15 {
		t.Errorf("schedule at lr/2: Muon lr %v, want 0.01", mu)
	}
}

// TestMuonMemory: Muon keeps one momentum for the blocks' matrices where
// AdamW keeps two moments, and the estimate says so.
func TestMuonMemory(t *testing.T) {
	a := testRunConfig()
	m := muonRunConfig()
	r := a.Model.Resolved()
	emb := float64(r.PaddedVocab() * r.Dim)
	params := float64(r.Params())
	if got, want := m.MemoryNeeded().Optimizer, 8*emb+4*(params-emb); got != want {
		t.Errorf("Muon optimizer state %v bytes, want %v", got, want)
	}
	if got, want := a.MemoryNeeded().Optimizer, 8*params; got != want {
		t.Errorf("AdamW optimizer state %v bytes, want %v", got, want)
	}
}

// TestMuonConfigFile: configs/gpt-50m-muon.json is the ~50 M model its
// comment says, trained with Muon.
func TestMuonConfigFile(t *testing.T) {
	c, err := LoadConfig("gpt-50m-muon")
	if err != nil {
		t.Fatal(err)
	}
	n := c.Model.Params()
	if c.OptimizerName() != "muon" || n < 49.25e6 || n >= 49.35e6 || !strings.Contains(c.Comment, "49.3 M") {
		t.Errorf("gpt-50m-muon: optimizer %s, %d parameters, comment %q", c.OptimizerName(), n, c.Comment)
	}
	t.Logf("gpt-50m-muon: %.2f M parameters, %.1f MFLOP/token, memory %s", float64(n)/1e6, float64(c.Model.FLOPsPerToken())/1e6, c.MemoryNeeded())
}
