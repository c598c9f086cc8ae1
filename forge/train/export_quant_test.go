package train

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
)

// TestExportQuantizedLoadsExactly: a fake-quantised model, partly pruned,
// exported with its levels and scales and loaded back, gives the same
// logits bit for bit on the CPU (the loader's r·scale are the float32
// values FakeQuant fed the matmuls). It also reports the size of the
// export beside the float32 export's for the tiny and small configs.
func TestExportQuantizedLoadsExactly(t *testing.T) {
	for _, name := range []string{"tiny", "small"} {
		for _, mode := range []string{"int8", "ternary"} {
			cfg, err := LoadConfig(name)
			if err != nil {
				t.Fatal(err)
			}
			c := cfg.Model
			c.Quant = mode
			if name == "small" {
				c.Context = 32 // the logits compared; the weights are the config's
			}
			m, err := gpt.New(c, 3)
			if err != nil {
				t.Fatal(err)
			}
			if err := nn.PruneByMagnitude(m.Linears()[:3], 0.3); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			qdir, fdir := filepath.Join(dir, "q"), filepath.Join(dir, "f")
			if err := ExportQuantized(m, nil, qdir, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := Export(m, nil, fdir); err != nil {
				t.Fatal(err)
			}
			lm, _, gotMode, err := LoadQuantized(qdir)
			if err != nil {
				t.Fatal(err)
			}
			if gotMode != mode || lm.Config.Quant != forge.QuantNone {
				t.Fatalf("loaded mode %q, model quant %q", gotMode, lm.Config.Quant)
			}
			ids := randIDsForExport(c.Vocab, 2, 32)
			want, got := m.Forward(ids, nil).Float32s(), lm.Forward(ids, nil).Float32s()
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("%s %s: logit %d = %v, the fake-quantised model's %v", name, mode, i, got[i], want[i])
				}
			}
			qs, fs := fileSize(t, filepath.Join(qdir, modelFile)), fileSize(t, filepath.Join(fdir, modelFile))
			emb := int64(c.PaddedVocab() * c.Dim * 4)
			t.Logf("%-5s %-7s model.safetensors %8.2f MB vs float32 %8.2f MB: %.1f× smaller (%.1f× without the float32 embedding of %.2f MB)",
				name, mode, float64(qs)/1e6, float64(fs)/1e6, float64(fs)/float64(qs), float64(fs-emb)/float64(qs-emb), float64(emb)/1e6)
			// The data: 1 byte (int8) or 2 bits (ternary) a block weight
			// plus the scales, 4 bytes every other parameter; the JSON
			// header adds a few kilobytes.
			data := int64(4 * nn.Count(m))
			for _, l := range m.BlockLinears() {
				out, in := int64(l.Layer.Weight.Size(0)), int64(l.Layer.Weight.Size(1))
				data -= 4 * out * in
				if mode == "int8" {
					data += out*in + 4*out
				} else {
					data += out*int64(packedCols(int(in))) + 4
				}
			}
			if qs < data || qs > data+32<<10 {
				t.Errorf("%s %s: the quantised export has %d bytes, want %d of data plus a header", name, mode, qs, data)
			}
		}
	}
}

func randIDsForExport(vocab, b, t int) *forge.Tensor {
	ids := make([]int32, b*t)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % vocab)
	}
	return forge.FromSlice(ids, b, t)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestTernaryPacking(t *testing.T) {
	r := []float32{-1, 0, 1, 1, -1, 0, 0, 1, -1, -1} // 2 rows of 5
	b := packTernary(r, 2, 5)
	if len(b) != 4 {
		t.Fatalf("%d bytes for 2 rows of 5, want 4", len(b))
	}
	got, err := unpackTernary(b, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r {
		if got[i] != r[i] {
			t.Fatalf("unpacked %v, want %v", got, r)
		}
	}
	// Element 0 in the low bits: code r+1 = 0 for −1, then 1, 2, 2.
	if b[0] != 0|1<<2|2<<4|2<<6 {
		t.Errorf("first byte %08b", b[0])
	}
	b[1] |= 3
	if _, err := unpackTernary(b, 2, 5); err == nil || !strings.Contains(err.Error(), "code 3") {
		t.Errorf("code 3: %v", err)
	}
}

func TestLoadQuantizedRefusesOtherExports(t *testing.T) {
	c := gpt.DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads = 64, 8, 16, 1, 2
	m, _ := gpt.New(c, 1)
	dir := filepath.Join(t.TempDir(), "hf")
	if _, err := Export(m, nil, dir); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadQuantized(dir); err == nil || !strings.Contains(err.Error(), "forge export --quant") {
		t.Errorf("loading a float32 export: %v", err)
	}
	if err := ExportQuantized(m, nil, filepath.Join(t.TempDir(), "q"), ""); err == nil || !strings.Contains(err.Error(), "int8 or ternary") {
		t.Errorf("exporting a model without quant: %v", err)
	}
	if err := ExportQuantized(m, nil, filepath.Join(t.TempDir(), "q"), "int8"); err != nil {
		t.Errorf("post-training int8 export: %v", err)
	}
}
