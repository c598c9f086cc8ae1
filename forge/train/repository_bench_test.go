package train

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/fmodel"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/forge/tokenizer"
)

// BenchmarkLoadModel compares reading a model from a .forge repository
// (mapped shards) with reading the same weights from a safetensors
// checkpoint (SaveWeights/LoadWeights), both from a warm page cache, and
// reports the bytes a second commit writes after one layer changed.
// FORGE_BENCH_CONFIG picks the config (default gpt-100m).
//
//	go test ./forge/train -run '^$' -bench LoadModel -benchtime 5x
func BenchmarkLoadModel(b *testing.B) {
	name := os.Getenv("FORGE_BENCH_CONFIG")
	if name == "" {
		name = "gpt-100m"
	}
	cfg, err := LoadConfig(name)
	if err != nil {
		b.Fatal(err)
	}
	m, err := gpt.New(cfg.Model, 1)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	repo := filepath.Join(dir, "m.forge")
	tok := tokenizer.TrainChar("abc")
	if _, err := CommitModel(repo, m, tok, cfg, 0, CommitOptions{}); err != nil {
		b.Fatal(err)
	}
	ckpt := filepath.Join(dir, "model.safetensors")
	if err := SaveWeights(ckpt, m); err != nil {
		b.Fatal(err)
	}
	// One layer changed: the second commit writes it alone.
	w := m.Blocks[0].MLP.Up.Weight
	forge.NoGrad(func() { w.CopyFrom(w.MulScalar(0.5)) })
	st, err := CommitModel(repo, m, tok, cfg, 1, CommitOptions{Message: "one layer"})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %d parameters; second commit after changing %s wrote %d of %d tensors, %d bytes (the model is %d)",
		name, cfg.Model.Params(), "blocks.0.mlp.w_up.weight", st.Written, st.Tensors, st.BytesWritten, st.Bytes)
	into, _ := gpt.New(cfg.Model, 2)
	// Both read into an existing model: what differs is how the bytes
	// arrive (mapped shards against a read of the whole file).
	b.Run("forge", func(b *testing.B) {
		for b.Loop() {
			r, err := fmodel.Open(repo)
			if err != nil {
				b.Fatal(err)
			}
			s, err := r.Load("")
			if err != nil {
				b.Fatal(err)
			}
			if err := fillParams(repo, &safetensors.File{Tensors: s.Tensors()}, "", into); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("safetensors", func(b *testing.B) {
		for b.Loop() {
			if err := LoadWeights(ckpt, into); err != nil {
				b.Fatal(err)
			}
		}
	})
	into = nil

	// Whole loads, model construction included, as forge generate does
	// them: mapped in place (MapRepository), copied into a model built
	// without initialising it (LoadRepository), and the copy into a
	// randomly initialised model (what LoadRepository did before
	// gpt.NewEmpty). "+forward" adds one forward pass of 8 tokens, which
	// is when a mapped model's pages are first touched.
	ids := forge.FromSlice(make([]int32, 8), 1, 8)
	loads := []struct {
		name string
		load func() (*gpt.Model, error)
	}{
		{"map", func() (*gpt.Model, error) {
			s, err := MapRepository(repo, "")
			if err != nil {
				return nil, err
			}
			if s.Mapped != len(s.Model.Params()) {
				b.Fatalf("mapped %d of %d parameters", s.Mapped, len(s.Model.Params()))
			}
			return s.Model, nil
		}},
		{"copy", func() (*gpt.Model, error) {
			s, err := LoadRepository(repo, "")
			if err != nil {
				return nil, err
			}
			return s.Model, nil
		}},
		{"copy-randinit", func() (*gpt.Model, error) {
			m, err := gpt.New(cfg.Model, 3)
			if err != nil {
				return nil, err
			}
			r, err := fmodel.Open(repo)
			if err != nil {
				return nil, err
			}
			s, err := r.Load("")
			if err != nil {
				return nil, err
			}
			defer s.Close()
			return m, fillParams(repo, &safetensors.File{Tensors: s.Tensors()}, "", m)
		}},
	}
	for _, l := range loads {
		for _, fwd := range []bool{false, true} {
			name := "whole/" + l.name
			if fwd {
				name += "+forward"
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					m, err := l.load()
					if err != nil {
						b.Fatal(err)
					}
					if fwd {
						forge.NoGrad(func() { m.Forward(ids, nil).Sum().Item() })
					}
					m = nil
					b.StopTimer()
					forge.DefaultDevice().Recycle() // the last model's memory goes back before the next load
					b.StartTimer()
				}
			})
		}
	}
}
