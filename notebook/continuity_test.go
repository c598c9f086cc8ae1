package notebook

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/train"
)

// GoNB runs every cell as a new process. TestCellsAsProcesses runs cells
// the same way: this test binary re-executed with cellEnv set runs one
// "cell" — reopen the run directory, train some steps with Train — and
// exits, so nothing survives from one cell to the next but the directory.

const cellEnv = "FORGE_NOTEBOOK_TEST_CELL" // "dir:steps"

// cellConfig is a small run with dropout on, so the resumed dropout
// generator, data position and optimizer moments all show in the losses.
func cellConfig() train.Config {
	c := train.DefaultConfig()
	c.Name, c.Tokenizer = "cells", "char"
	c.Model.Vocab, c.Model.Context, c.Model.Dim, c.Model.Layers, c.Model.Heads = 128, 16, 32, 2, 2
	c.Model.Dropout = 0.1
	c.Batch, c.GradAccum, c.Steps, c.Warmup = 4, 2, 40, 3
	c.EvalEvery, c.EvalBatches, c.SaveEvery = 5, 1, 0
	return c
}

// runCell is the body of one cell process: the notebook idiom (Open at the
// top of the cell, Train, Close) with the test's corpus slice.
func runCell(spec string) int {
	dir, n, ok := strings.Cut(spec, ":")
	steps, err := strconv.Atoi(n)
	if !ok || err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: want dir:steps\n", cellEnv, spec)
		return 2
	}
	s, err := open(dir, train.OpenOptions{Texts: []string{data.Austen()[:20000]}, Source: "test", NoCache: true}, cellConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := Train(s, steps); err != nil {
		fmt.Fprintln(os.Stderr, err)
		s.Close()
		return 1
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// cell runs one cell process on dir.
func cell(t *testing.T, dir string, steps int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	env := []string{cellEnv + "=" + dir + ":" + strconv.Itoa(steps)}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GONB_") { // the child is a plain process, not a GoNB cell
			env = append(env, e)
		}
	}
	cmd.Env = env
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cell (%d steps on %s): %v\n%s", steps, dir, err, out)
	}
	t.Logf("cell process: %d steps in %v", steps, time.Since(start).Round(time.Millisecond))
}

func TestCellsAsProcesses(t *testing.T) {
	root := t.TempDir()
	whole, split := filepath.Join(root, "whole"), filepath.Join(root, "split")
	cell(t, whole, 12)
	cell(t, split, 5) // creates the run
	cell(t, split, 4) // reopens it
	cell(t, split, 3)

	a, b := loadRun(t, whole), loadRun(t, split)
	if a.Step != 12 || b.Step != 12 {
		t.Fatalf("steps: whole %d, split %d; want 12", a.Step, b.Step)
	}
	la, lb := runLosses(t, whole), runLosses(t, split)
	if len(la) != 12 || len(lb) != 12 {
		t.Fatalf("metrics: %d and %d steps recorded, want 12", len(la), len(lb))
	}
	for i := range la {
		if la[i] != lb[i] {
			t.Fatalf("step %d: loss %v in three cells, %v in one: resume is not exact", i+1, lb[i], la[i])
		}
	}
	pa, pb := a.Model.Params(), b.Model.Params()
	if len(pa) != len(pb) {
		t.Fatalf("%d vs %d parameters", len(pa), len(pb))
	}
	for i := range pa {
		va, vb := pa[i].Tensor.Float32s(), pb[i].Tensor.Float32s()
		for j := range va {
			if va[j] != vb[j] {
				t.Fatalf("%s[%d] = %v after three cells, %v after one", pa[i].Name, j, vb[j], va[j])
			}
		}
	}
	if la[len(la)-1] >= la[0] {
		t.Errorf("loss did not fall: %v → %v", la[0], la[len(la)-1])
	}
	t.Logf("losses bit-identical over 12 steps (%.4f → %.4f), %d parameter tensors equal", la[0], la[len(la)-1], len(pa))
}

func loadRun(t *testing.T, dir string) *train.Snapshot {
	t.Helper()
	s, err := train.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runLosses reads the training losses from the run's metrics history by
// reopening it (read back from disk, as the next cell would).
func runLosses(t *testing.T, dir string) []float64 {
	t.Helper()
	s, err := open(dir, train.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []float64
	for _, m := range s.Trainer().History.Steps {
		out = append(out, m.Loss)
	}
	return out
}
