package train

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLastRun: the summary of a Train call is computed from the steps it
// trained, once, for every front end.
func TestLastRun(t *testing.T) {
	cfg := testRunConfig()
	cfg.Batch, cfg.GradAccum = 2, 1
	s := openTest(t, t.TempDir(), &cfg)
	defer s.Close()
	if got := s.LastRun(); got.Steps() != 0 || got.String() != "no step trained (at step 0)" {
		t.Fatalf("before any call: %+v %q", got, got)
	}
	if _, err := s.Train(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Train(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	sum := s.LastRun()
	h := s.trainer.History.Steps
	if sum.From != 3 || sum.To != 15 || sum.Steps() != 12 || sum.Config != "test" || len(sum.Losses) != 12 || sum.Interrupted {
		t.Fatalf("summary %+v", sum)
	}
	if sum.Tokens != 12*int64(cfg.TokensPerStep()) || sum.Elapsed <= 0 || sum.TokensPerSec() <= 0 {
		t.Errorf("tokens %d in %v (%.0f/s)", sum.Tokens, sum.Elapsed, sum.TokensPerSec())
	}
	mean := 0.0
	for _, m := range h[5:] {
		mean += m.Loss
	}
	mean /= 10
	if sum.FirstLoss != h[3].Loss || math.Abs(sum.LastLoss-mean) > 1e-12 || sum.LR != h[14].LR || sum.Losses[11] != h[14].Loss {
		t.Errorf("losses: first %v (want %v), last %v (want the mean of the last 10, %v), lr %v (want %v)", sum.FirstLoss, h[3].Loss, sum.LastLoss, mean, sum.LR, h[14].LR)
	}
	if v := s.trainer.History.LastVal(); v == nil || sum.ValLoss == nil || *sum.ValLoss != *v.ValLoss {
		t.Errorf("val loss %v, want the history's latest", sum.ValLoss)
	}
	if str := sum.String(); !strings.HasPrefix(str, "steps 3→15 in ") || !strings.Contains(str, " tok/s): loss ") || !strings.Contains(str, ", val ") {
		t.Errorf("String() = %q", str)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Train(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if sum := s.LastRun(); !sum.Interrupted || sum.Steps() != 0 || sum.From != 15 {
		t.Errorf("a cancelled call: %+v", sum)
	}
}

// TestOpenByConfigName: Open loads a config by name for a new run (the
// default name when none is given), applies Tokenizer to it, keeps an
// existing run's config when no name is given, and says what is wrong
// with a name it cannot load.
func TestOpenByConfigName(t *testing.T) {
	cfg := testRunConfig()
	cfg.Name = "named"
	cfg.Tokenizer = "bpe"
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "named.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	s, err := Open(dir, OpenOptions{DefaultConfigName: file, Tokenizer: "char", Texts: testTexts(), Source: "test", NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.config.Name != "named" || s.config.Tokenizer != "char" || s.Resumed() {
		t.Errorf("new run: config %q, tokenizer %q, resumed %v", s.config.Name, s.config.Tokenizer, s.Resumed())
	}
	s.Close()
	// Reopened without a name (and with another default and tokenizer):
	// the saved config stays.
	s, err = Open(dir, OpenOptions{DefaultConfigName: "tiny", Tokenizer: "bpe"})
	if err != nil {
		t.Fatal(err)
	}
	if s.config.Name != "named" || s.config.Tokenizer != "char" || !s.Resumed() {
		t.Errorf("resumed run: config %q, tokenizer %q, resumed %v", s.config.Name, s.config.Tokenizer, s.Resumed())
	}
	s.Close()
	if _, err := Open(filepath.Join(t.TempDir(), "x"), OpenOptions{ConfigName: "no-such-config"}); err == nil || !strings.Contains(err.Error(), "no-such-config") {
		t.Errorf("an unknown config name: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "y"), OpenOptions{ConfigName: file, Tokenizer: "words"}); err == nil || !strings.Contains(err.Error(), "words") {
		t.Errorf("an unknown tokenizer: %v", err)
	}
	if d, err := DefaultRunDir(file); err != nil || d != filepath.Join("runs", "named") {
		t.Errorf("DefaultRunDir = %q, %v", d, err)
	}
}
