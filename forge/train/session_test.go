package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/data"
)

// testRunConfig is a small, fast run on a slice of the built-in corpus.
func testRunConfig() Config {
	c := DefaultConfig()
	c.Name = "test"
	c.Model.Vocab, c.Model.Context, c.Model.Dim, c.Model.Layers, c.Model.Heads = 300, 32, 32, 2, 2
	c.Model.Dropout = 0.1 // the dropout generator must resume too
	c.Batch, c.GradAccum, c.Steps, c.Warmup = 4, 2, 50, 3
	c.EvalEvery, c.EvalBatches, c.SaveEvery = 4, 2, 3
	return c
}

func testTexts() []string { return []string{data.Austen()[:60000]} }

func openTest(t *testing.T, dir string, cfg *Config) *Session {
	t.Helper()
	s, err := Open(dir, OpenOptions{Config: cfg, Texts: testTexts(), Source: "test", NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func losses(h History) []float64 {
	var out []float64
	for _, m := range h.Steps {
		out = append(out, m.Loss)
	}
	return out
}

func TestResumeIsExact(t *testing.T) {
	cfg := testRunConfig()
	whole := openTest(t, t.TempDir(), &cfg)
	if _, err := whole.Train(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	want := losses(whole.trainer.History)
	whole.Close()

	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := openTest(t, dir, nil)
	defer b.Close()
	if !b.Resumed() || b.trainer.StepCount() != 7 || len(b.trainer.History.Steps) != 7 {
		t.Fatalf("resumed at step %d with %d records", b.trainer.StepCount(), len(b.trainer.History.Steps))
	}
	if _, err := b.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	got := losses(b.trainer.History)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: resumed loss %v, uninterrupted %v\nresumed %v\nwhole   %v", i+1, got[i], want[i], got, want)
		}
	}
	if v := b.trainer.History.Steps[7].ValLoss; v == nil || *v != *whole.trainer.History.Steps[7].ValLoss {
		t.Errorf("validation loss at step 8 differs after resume")
	}
	// metrics.jsonl holds exactly the 10 records.
	hist, err := readMetrics(filepath.Join(dir, MetricsFile), 10)
	if err != nil || len(hist) != 10 || hist[9].Loss != want[9] {
		t.Errorf("metrics file: %d records, err %v", len(hist), err)
	}
}

// A run killed between steps (or mid-save) reopens at its last good
// checkpoint, and the metrics written after it are dropped.
func TestCrashRecovery(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery = 0
	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	a.Train(context.Background(), 4) // saves at the end: step 4
	// Simulate a crash after 2 more steps: metrics written, no checkpoint.
	a.trainer.Run(context.Background(), 2, a.record)
	a.metrics.Close()
	a.metrics = nil
	a.lock.release() // the dead process's lock goes with it
	// ...and a save torn half way: a temporary directory and a checkpoint
	// whose weights are truncated, already named by latest.
	root := filepath.Join(dir, CheckpointDir)
	os.MkdirAll(filepath.Join(root, ".tmp-step-000006-x"), 0o755)
	bad := filepath.Join(root, "step-000006")
	os.MkdirAll(bad, 0o755)
	for _, f := range []string{modelFile, optimFile, stateFile} {
		b, _ := os.ReadFile(filepath.Join(root, "step-000004", f))
		os.WriteFile(filepath.Join(bad, f), b, 0o644)
	}
	b, _ := os.ReadFile(filepath.Join(bad, modelFile))
	os.WriteFile(filepath.Join(bad, modelFile), b[:len(b)/2], 0o644)
	os.WriteFile(filepath.Join(dir, LatestFile), []byte("step-000006\n"), 0o644)

	s := openTest(t, dir, nil)
	defer s.Close()
	if s.trainer.StepCount() != 4 || len(s.trainer.History.Steps) != 4 {
		t.Fatalf("reopened at step %d with %d records, want 4", s.trainer.StepCount(), len(s.trainer.History.Steps))
	}
	if !strings.Contains(s.FellBack(), "step-000006") || !strings.Contains(s.FellBack(), "checksum") {
		t.Errorf("fell back silently or for the wrong reason: %q", s.FellBack())
	}
	if _, err := readMetrics(filepath.Join(dir, MetricsFile), 5); err == nil {
		t.Error("metrics.jsonl still holds the records of the lost steps")
	}
}

func TestOpenErrors(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	s.Close()
	other := cfg
	other.Model.Layers = 3
	if _, err := Open(dir, OpenOptions{Config: &other}); err == nil || !strings.Contains(err.Error(), "another model") {
		t.Errorf("opening with another model: %v", err)
	}
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"model": {"vocab": 300, "n_layerz": 2}}`), 0o644)
	if _, err := Open(dir, OpenOptions{}); err == nil || !strings.Contains(err.Error(), "n_layerz") {
		t.Errorf("corrupt config: %v", err)
	}
	// Every checkpoint damaged: a clear error, nothing silently re-initialised.
	dir2 := t.TempDir()
	s = openTest(t, dir2, &cfg)
	s.Close()
	ents, _ := os.ReadDir(filepath.Join(dir2, CheckpointDir))
	for _, e := range ents {
		if e.IsDir() {
			os.WriteFile(filepath.Join(dir2, CheckpointDir, e.Name(), stateFile), []byte("{"), 0o644)
		}
	}
	if _, err := Open(dir2, OpenOptions{}); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("all checkpoints damaged: %v", err)
	}
}

func TestConfigsParse(t *testing.T) {
	for _, name := range []string{"tiny", "small", "gpt-10m", "gpt-25m", "gpt-100m", "gpt2-tiny", "gpt-50m-deep", "gpt-200m", "gpt-50m-ternary"} {
		c, err := LoadConfig(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("%-9s %6.1f M parameters, %5.1f MFLOP/token", name, float64(c.Model.Params())/1e6, float64(c.Model.FLOPsPerToken())/1e6)
	}
	if _, err := LoadConfig("nope"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown config: %v", err)
	}
}

// TestDamagedLogResumes: a flipped byte in metrics.jsonl, a truncated one
// or a missing one no longer stops resume. The damaged file is set aside
// whole (nothing deleted), the records that parse are kept, a warning
// says so, and training from the checkpoint gives the losses of an
// uninterrupted run.
func TestDamagedLogResumes(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery = 0
	whole := openTest(t, t.TempDir(), &cfg)
	if _, err := whole.Train(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	want := losses(whole.trainer.History)
	whole.Close()
	for _, c := range []struct {
		name string
		harm func(b []byte) []byte // nil: delete the file
		kept int
	}{
		{"flipped byte", func(b []byte) []byte { b[0] = 'x'; return b }, 5},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, 2},
		{"missing", nil, 0},
	} {
		dir := t.TempDir()
		a := openTest(t, dir, &cfg)
		if _, err := a.Train(context.Background(), 6); err != nil {
			t.Fatal(err)
		}
		a.Close()
		path := filepath.Join(dir, MetricsFile)
		orig, _ := os.ReadFile(path)
		if c.harm == nil {
			os.Remove(path)
		} else {
			os.WriteFile(path, c.harm(append([]byte(nil), orig...)), 0o644)
		}
		harmed, _ := os.ReadFile(path)
		var log strings.Builder
		b, err := Open(dir, OpenOptions{Log: &log})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if b.trainer.StepCount() != 6 || len(b.trainer.History.Steps) < c.kept {
			t.Errorf("%s: resumed at step %d with %d records, want step 6 and at least %d", c.name, b.trainer.StepCount(), len(b.trainer.History.Steps), c.kept)
		}
		if !strings.Contains(log.String(), "warning:") || !strings.Contains(log.String(), "step 6") {
			t.Errorf("%s: no warning: %q", c.name, log.String())
		}
		if c.harm != nil {
			aside, _ := filepath.Glob(path + ".damaged-*")
			if len(aside) != 1 {
				t.Fatalf("%s: set aside %v", c.name, aside)
			}
			if got, _ := os.ReadFile(aside[0]); string(got) != string(harmed) {
				t.Errorf("%s: the damaged log was not kept as it was", c.name)
			}
		}
		if _, err := b.Train(context.Background(), 2); err != nil {
			t.Fatal(err)
		}
		h := b.trainer.History.Steps
		for i, m := range h[len(h)-2:] {
			if m.Loss != want[6+i] {
				t.Errorf("%s: step %d loss %v after resume, uninterrupted %v", c.name, m.Step, m.Loss, want[6+i])
			}
		}
		b.Close()
		// The new log is whole again: the next open needs no repair.
		log.Reset()
		r, err := Open(dir, OpenOptions{Log: &log})
		if err != nil || strings.Contains(log.String(), "warning") {
			t.Errorf("%s: reopening the repaired run: %v %q", c.name, err, log.String())
		}
		if r != nil {
			r.Close()
		}
	}
}

// TestTokenFilesChecked: token files changed after the run was created —
// valid ids, so nothing else would notice — stop Open with one line naming
// the file; restored, the run opens again.
func TestTokenFilesChecked(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	if _, err := s.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, DataDir, data.TrainFile)
	orig, _ := os.ReadFile(path)
	changed := append([]byte(nil), orig...)
	// The last token id (little-endian uint16) becomes another id < 256,
	// valid for any vocabulary.
	n := len(changed)
	changed[n-2], changed[n-1] = (changed[n-2]+1)%200, 0
	os.WriteFile(path, changed, 0o644)
	_, err := Open(dir, OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not the token file") || strings.Count(err.Error(), "not the token file") != 1 {
		t.Fatalf("open with changed token ids: %v", err)
	}
	os.WriteFile(path, orig, 0o644)
	r, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.trainer.StepCount() != 2 {
		t.Errorf("reopened at step %d", r.trainer.StepCount())
	}
	r.Close()
}

// TestOpenRefusesConfigsTooLarge: configs whose weights or activations
// cannot fit are refused before anything is allocated or written, in one
// line naming the estimate, the memory available and what to shrink.
func TestOpenRefusesConfigsTooLarge(t *testing.T) {
	t.Setenv("FORGE_MEMORY_AVAILABLE", fmt.Sprint(8<<30))
	for _, c := range []struct {
		name   string
		change func(c *Config)
		shrink string
	}{
		{"d_model 1e9", func(c *Config) { c.Model.Dim = 1_000_000_000 }, "d_model"},
		{"ffn_hidden 1e9", func(c *Config) { c.Model.FFNHidden = 1_000_000_000 }, "d_model, n_layer or ffn_hidden"},
		{"n_layer 100000", func(c *Config) { c.Model.Layers = 100_000; c.Model.Dim = 512; c.Model.Heads = 8 }, "n_layer"},
		{"batch 1e9", func(c *Config) { c.Batch = 1_000_000_000 }, "batch or context"},
	} {
		cfg := testRunConfig()
		c.change(&cfg)
		dir := filepath.Join(t.TempDir(), "run")
		start := time.Now()
		_, err := Open(dir, OpenOptions{Config: &cfg, Texts: testTexts(), NoCache: true})
		if err == nil || !strings.Contains(err.Error(), "needs at least") || !strings.Contains(err.Error(), "8.0 GiB of memory is available") ||
			!strings.Contains(err.Error(), c.shrink) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v", c.name, err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%s: refused only after %v", c.name, el)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: the refused run left %s", c.name, dir)
		}
	}
	// The test config itself fits.
	cfg := testRunConfig()
	if err := cfg.CheckMemory(); err != nil {
		t.Error(err)
	}
	if m := cfg.MemoryNeeded(); m.Total() <= 0 || m.Weights != 4*float64(cfg.Model.Params()) {
		t.Errorf("estimate %v for %d parameters", m, cfg.Model.Params())
	}
}

// TestReopenOnFullDisk: reopening a run whose metrics must be cut back to
// its checkpoint, on a disk where that write fails, says what failed and
// that the checkpoint is intact — not "no checkpoint loads" — and tries
// no older checkpoint; a run that stopped at its checkpoint reopens with
// nothing written at all, and a reader needs no space either.
func TestReopenOnFullDisk(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery = 0
	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	if _, err := a.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	a.Close()
	full := func(string, []byte) error { return syscall.ENOSPC }
	orig := writeMetricsFile
	t.Cleanup(func() { writeMetricsFile = orig })
	writeMetricsFile = full
	b, err := Open(dir, OpenOptions{}) // stopped at its checkpoint: nothing to rewrite
	if err != nil {
		t.Fatalf("reopening a run that needs no write, on a full disk: %v", err)
	}
	// Two steps recorded after the checkpoint, as a crash leaves them.
	b.trainer.Run(context.Background(), 2, b.record)
	b.Close()
	_, err = Open(dir, OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), "checkpoint is intact") || !strings.Contains(err.Error(), "no space left") || strings.Contains(err.Error(), "no checkpoint") {
		t.Fatalf("reopening on a full disk: %v", err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("a reader on a full disk: %v", err)
	}
	writeMetricsFile = orig
	r, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.trainer.StepCount() != 3 || len(r.trainer.History.Steps) != 3 {
		t.Errorf("with space again: step %d, %d records", r.trainer.StepCount(), len(r.trainer.History.Steps))
	}
	r.Close()
}

// TestOpenData: Data creates a run on those texts; for a run that exists
// it is refused (ErrRunHasData) before anything is touched.
func TestOpenData(t *testing.T) {
	cfg := testRunConfig()
	root := t.TempDir()
	text := filepath.Join(root, "a.txt")
	os.WriteFile(text, []byte(data.Austen()[:60000]), 0o644)
	dir := filepath.Join(root, "run")
	if Exists(dir) {
		t.Fatal("Exists before the run was made")
	}
	s, err := Open(dir, OpenOptions{Config: &cfg, Data: []string{text}, NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !Exists(dir) {
		t.Fatal("Exists after Open created the run")
	}
	src, _ := os.ReadFile(filepath.Join(dir, SourceFile))
	if !strings.Contains(string(src), "a.txt") {
		t.Errorf("source.json %s", src)
	}
	if _, err := Open(dir, OpenOptions{Data: []string{text}}); !errors.Is(err, ErrRunHasData) || !strings.Contains(err.Error(), "choose a new directory") {
		t.Errorf("data for a run that exists: %v", err)
	}
}
