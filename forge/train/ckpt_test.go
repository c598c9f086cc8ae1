package train

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
)

// TestCheckpointResumeIsExact: a run with every block checkpointed and
// dropout on, stopped after 7 steps and resumed for 3, has the losses of
// the uninterrupted 10 steps, and those of the same run without
// checkpointing, bit for bit; so does a plain run resumed at step 7 with
// checkpointing turned on.
func TestCheckpointResumeIsExact(t *testing.T) {
	plain := testRunConfig()
	cfg := plain
	cfg.Model.Checkpoint = gpt.AllBlocks()
	whole := openTest(t, t.TempDir(), &cfg)
	if _, err := whole.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	want := losses(whole.trainer.History)
	whole.Close()
	ref := openTest(t, t.TempDir(), &plain)
	if _, err := ref.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	for i, l := range losses(ref.trainer.History) {
		if l != want[i] {
			t.Fatalf("step %d: checkpointed loss %v, plain %v", i+1, want[i], l)
		}
	}
	ref.Close()

	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := openTest(t, dir, nil)
	defer b.Close()
	if !b.Config().Model.Checkpoint.All() {
		t.Fatalf("the resumed run's config lost checkpoint_activations: %v", b.Config().Model.Checkpoint)
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

	// A plain run resumed with checkpointing turned on (it changes what
	// the backward keeps, not the model) goes on as it would have.
	dir = t.TempDir()
	p := openTest(t, dir, &plain)
	if _, err := p.Train(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	p.Close()
	q := openTest(t, dir, &cfg)
	defer q.Close()
	if !q.Resumed() || !q.Config().Model.Checkpoint.All() {
		t.Fatalf("resumed %v with checkpoint %v", q.Resumed(), q.Config().Model.Checkpoint)
	}
	if _, err := q.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	for i, l := range losses(q.trainer.History) {
		if l != want[i] {
			t.Fatalf("step %d: loss %v after turning checkpointing on at step 7, want %v", i+1, l, want[i])
		}
	}
}

// randomBatches are batches of uniform token ids.
type randomBatches struct {
	g           *forge.Generator
	vocab, b, t int
}

func (r *randomBatches) Next() (x, y []int32) {
	x, y = make([]int32, r.b*r.t), make([]int32, r.b*r.t)
	for i := range x {
		x[i], y[i] = int32(r.g.Intn(r.vocab)), int32(r.g.Intn(r.vocab))
	}
	return x, y
}

// stepPeak trains cfg two steps on the default device and returns the
// second step's peak memory (the device's ledger).
func stepPeak(t *testing.T, cfg Config) int64 {
	t.Helper()
	runtime.GC()
	forge.DefaultDevice().Recycle()
	m, err := gpt.New(cfg.Model, cfg.Seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(cfg, m, &randomBatches{g: forge.NewGenerator(1), vocab: cfg.Model.Vocab, b: cfg.Batch, t: cfg.Model.Context}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var peak int64
	for range 2 {
		ms := tr.Step()
		if ms.Memory == nil {
			t.Skip("the device does not count its memory")
		}
		peak = ms.Memory.Peak()
	}
	return peak
}

// TestCheckpointLowersPeak: one training step of the tiny config with
// every block checkpointed peaks lower than without, by at least half of
// what MemoryNeeded says checkpointing saves (the activations of all
// blocks but one, less their inputs: 65 MB here). FORGE_CKPT_MEASURE
// names more configs to measure ("small,gpt-25m"; one micro-batch a
// step), whose peaks are logged.
func TestCheckpointLowersPeak(t *testing.T) {
	names := []string{"tiny"}
	if v := os.Getenv("FORGE_CKPT_MEASURE"); v != "" {
		names = append(names, strings.Split(v, ",")...)
	}
	for _, name := range names {
		plain, err := LoadConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		plain.GradAccum, plain.EvalEvery = 1, 0
		ck := plain
		ck.Model.Checkpoint = gpt.AllBlocks()
		p0, p1 := stepPeak(t, plain), stepPeak(t, ck)
		e0, e1 := plain.MemoryNeeded(), ck.MemoryNeeded()
		saved, estSaved := float64(p0-p1), e0.Total()-e1.Total()
		t.Logf("%s on %s: peak %.1f MB plain, %.1f MB checkpointed (%.1f MB less); estimate %.1f and %.1f MB (%.1f MB less)",
			name, forge.DefaultDevice().Name(), float64(p0)/1e6, float64(p1)/1e6, saved/1e6, e0.Total()/1e6, e1.Total()/1e6, estSaved/1e6)
		if saved < 0.5*estSaved {
			t.Errorf("%s: checkpointing lowered the peak by %.1f MB, want at least half of the estimated %.1f MB", name, saved/1e6, estSaved/1e6)
		}
	}
}

// TestScaleConfigs: gpt-200m has the seed's 205.5 M parameters
// (205,546,496, the formula in its comment) with every block
// checkpointed; gpt-50m-deep is about 50 M, 24 blocks of width 384, every
// other one checkpointed; both fit the estimate they print with far
// fewer activations than unchecked.
func TestScaleConfigs(t *testing.T) {
	big, err := LoadConfig("gpt-200m")
	if err != nil {
		t.Fatal(err)
	}
	if n := big.Model.Params(); n != 205_546_496 || !big.Model.Checkpoint.All() {
		t.Errorf("gpt-200m: %d parameters, checkpoint %v; want 205,546,496 and true", n, big.Model.Checkpoint)
	}
	deep, err := LoadConfig("gpt-50m-deep")
	if err != nil {
		t.Fatal(err)
	}
	if n, m := deep.Model.Params(), deep.Model; n < 45e6 || n > 55e6 || m.Layers != 24 || m.Dim != 384 || m.Checkpoint.Count(24) != 12 {
		t.Errorf("gpt-50m-deep: %d parameters, %d layers of %d, %d checkpointed", n, m.Layers, m.Dim, m.Checkpoint.Count(24))
	}
	for _, c := range []Config{big, deep} {
		plain := c
		plain.Model.Checkpoint = gpt.Blocks{}
		if ck, pl := c.MemoryNeeded().Activations, plain.MemoryNeeded().Activations; ck > 0.7*pl {
			t.Errorf("%s: activations %.2f GB checkpointed, %.2f GB plain; want well under", c.Name, ck/1e9, pl/1e9)
		}
	}
}
