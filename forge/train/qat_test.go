package train

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/safetensors"
)

// prunedZero reports the first Linear whose masked weights are not zero.
func prunedZero(t *testing.T, s *Session, when string) {
	t.Helper()
	n := 0
	for _, l := range s.Model().Linears() {
		if l.Layer.Mask == nil {
			t.Fatalf("%s: %s lost its mask", when, l.Name)
		}
		w, mk := l.Layer.Weight.Float32s(), l.Layer.Mask.Float32s()
		for i := range w {
			if mk[i] == 0 {
				n++
				if w[i] != 0 {
					t.Fatalf("%s: %s weight %d is pruned but holds %v", when, l.Name, i, w[i])
				}
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: nothing is pruned", when)
	}
}

// TestResumeIsExactQuantAndMask: a ternary run pruned to 50% after two
// steps (so AdamW's moments of the pruned weights are not zero) keeps
// the pruned weights at zero through later steps, saves the masks in its
// checkpoints, and resumes exactly: 2 + 5 + 3 steps equal 2 + 8.
func TestResumeIsExactQuantAndMask(t *testing.T) {
	for _, quant := range []string{"ternary", "int8"} {
		t.Run(quant, func(t *testing.T) {
			cfg := testRunConfig()
			cfg.Model.Quant = quant
			cfg.Model.Untied = true // the untied head is pruned too (not quantised)
			run := func(dir string, parts ...int) *Session {
				s := openTest(t, dir, &cfg)
				if _, err := s.Train(context.Background(), 2); err != nil {
					t.Fatal(err)
				}
				if err := s.PruneByMagnitude(0.5); err != nil {
					t.Fatal(err)
				}
				for _, n := range parts {
					if _, err := s.Train(context.Background(), n); err != nil {
						t.Fatal(err)
					}
				}
				return s
			}
			whole := run(t.TempDir(), 8)
			want := losses(whole.trainer.History)
			prunedZero(t, whole, "after 10 steps")
			if got := whole.Model().Blocks[0].Attn.WQKV.Quant; got != quant {
				t.Fatalf("quant %q on the block linears", got)
			}
			whole.Close()

			dir := t.TempDir()
			a := run(dir, 5)
			a.Close()
			f, err := safetensors.ReadFile(filepath.Join(dir, CheckpointDir, "step-000007", modelFile))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Get("mask.blocks.1.mlp.w_down.weight"); !ok {
				t.Fatalf("the checkpoint holds no masks")
			}
			b := openTest(t, dir, nil)
			defer b.Close()
			prunedZero(t, b, "resumed")
			if _, err := b.Train(context.Background(), 3); err != nil {
				t.Fatal(err)
			}
			prunedZero(t, b, "resumed + 3 steps")
			got := losses(b.trainer.History)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("step %d: resumed loss %v, uninterrupted %v\nresumed %v\nwhole   %v", i+1, got[i], want[i], got, want)
				}
			}
			if s := nn.Summarize(b.Model()); s.Rows[len(s.Rows)-1].Sparsity != 0.5 || !s.Rows[len(s.Rows)-1].Masked {
				t.Errorf("summary of the head: %+v", s.Rows[len(s.Rows)-1])
			}
		})
	}
}

// TestMemoryCountsQuantisedWeights: quant adds one float32 copy of the
// block weights (the fake-quantised ones the backward keeps).
func TestMemoryCountsQuantisedWeights(t *testing.T) {
	cfg, err := LoadConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	plain := cfg.MemoryNeeded()
	cfg.Model.Quant = "ternary"
	q := cfg.MemoryNeeded()
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		t.Fatal(err)
	}
	block := 0
	for _, l := range m.BlockLinears() {
		block += l.Layer.Weight.Numel()
	}
	if d := q.Activations - plain.Activations; d != float64(4*block) || q.Weights != plain.Weights {
		t.Errorf("quant adds %v bytes of activations, want %d (4 × %d block weights)", d, 4*block, block)
	}
}
