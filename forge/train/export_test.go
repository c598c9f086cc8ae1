package train

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/tokenizer"
)

// havePyTorch reports whether Debian's python3-torch is importable.
func havePyTorch() bool {
	return exec.Command("/usr/bin/python3", "-c", "import torch").Run() == nil
}

// TestExportMatchesTransformersSemantics exports models of both families
// and has tests/check_export.py recompute the logits the way transformers'
// LlamaForCausalLM and GPT2LMHeadModel would, from the exported files alone.
func TestExportMatchesTransformersSemantics(t *testing.T) {
	if !havePyTorch() {
		t.Skip("needs /usr/bin/python3 with torch (scripts/setup.sh golden installs it)")
	}
	llama := gpt.DefaultConfig()
	llama.Vocab, llama.Context, llama.Dim, llama.Layers, llama.Heads, llama.KVHeads = 100, 16, 32, 2, 4, 2
	llama.InitStd = 0.3 // logits far from uniform, so a wrong permutation shows
	gpt2 := llama
	gpt2.KVHeads, gpt2.Norm, gpt2.MLP, gpt2.Position, gpt2.Bias = 0, "layernorm", "gelu", "learned", true
	untied := llama
	untied.Untied = true
	ternary := llama // exported with its fake-quantised, pruned weights
	ternary.Quant = "ternary"
	var args []string
	for name, c := range map[string]gpt.Config{"llama": llama, "gpt2": gpt2, "llama-untied": untied, "llama-ternary-pruned": ternary} {
		m, err := gpt.New(c, 5)
		if err != nil {
			t.Fatal(err)
		}
		if c.Quant != "" {
			if err := nn.PruneByMagnitude(m.Linears(), 0.3); err != nil {
				t.Fatal(err)
			}
		}
		if c.Bias { // make the biases nonzero
			forge.NoGrad(func() {
				for _, p := range m.Params() {
					if strings.HasSuffix(p.Name, "bias") {
						p.Tensor.CopyFrom(forge.NewGenerator(9).Randn(forge.Float32, p.Tensor.Shape()...).MulScalar(0.1))
					}
				}
			})
		}
		dir := t.TempDir()
		fam, err := Export(m, nil, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, fam) {
			t.Errorf("%s exported as %s", name, fam)
		}
		ids := forge.NewGenerator(1).RandInt(0, c.Vocab, 2, 16)
		var logits []float32
		forge.NoGrad(func() { logits = m.Forward(ids, nil).Float32s() })
		V := c.PaddedVocab()
		idRows := [][]int32{ids.Int32s()[:16], ids.Int32s()[16:]}
		var lg [][][]float32
		for b := range 2 {
			var rows [][]float32
			for tt := range 16 {
				rows = append(rows, logits[(b*16+tt)*V:(b*16+tt+1)*V])
			}
			lg = append(lg, rows)
		}
		caseFile := filepath.Join(dir, "case.json")
		js, _ := json.Marshal(map[string]any{"ids": idRows, "logits": lg})
		os.WriteFile(caseFile, js, 0o644)
		args = append(args, dir, caseFile)
	}
	// One Python process: importing torch takes seconds.
	out, err := exec.Command("/usr/bin/python3", append([]string{"../../tests/check_export.py"}, args...)...).CombinedOutput()
	if err != nil {
		t.Errorf("%v\n%s", err, out)
	} else {
		t.Logf("\n%s", strings.TrimSpace(string(out)))
	}
}

func TestExportRefusesUnmappedArchitectures(t *testing.T) {
	c := gpt.DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.MLP = 100, 8, 16, 1, 2, "gelu" // RoPE + GELU: neither family
	m, _ := gpt.New(c, 1)
	if _, err := Export(m, nil, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no transformers architecture") {
		t.Errorf("got %v", err)
	}
}

// failingSave is a tokenizer whose Save fails: an export that dies after
// the model is written.
type failingSave struct{ tokenizer.Tokenizer }

func (failingSave) Save(string) error { return errors.New("disk gone") }

// TestExportIsAtomic: an export over an older one that fails half way
// leaves the older one whole (not a new model beside the old tokenizer);
// a crash between the switch's renames is repaired by the next export;
// the leftovers of an interrupted export are removed; a directory with
// files an export does not write is refused, and nothing in it touched.
func TestExportIsAtomic(t *testing.T) {
	c := gpt.DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.KVHeads = 300, 16, 32, 1, 2, 2
	m1, _ := gpt.New(c, 1)
	m2, _ := gpt.New(c, 2)
	tok := tokenizer.TrainChar("abc")
	root := t.TempDir()
	out := filepath.Join(root, "export")
	if _, err := Export(m1, tok, out); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		got := map[string]string{}
		for _, f := range exportFiles {
			b, err := os.ReadFile(filepath.Join(out, f))
			if err != nil {
				t.Fatal(err)
			}
			got[f] = string(b)
		}
		return got
	}
	first := snapshot()
	if _, err := Export(m2, failingSave{tok}, out); err == nil {
		t.Fatal("a failing export reported success")
	}
	if !maps.Equal(snapshot(), first) {
		t.Error("a failed export changed the older export in place")
	}
	leftovers := func() []string {
		l, _ := filepath.Glob(filepath.Join(root, ".export.*"))
		return l
	}
	if l := leftovers(); len(l) != 0 {
		t.Errorf("a failed export left %v", l)
	}
	// A crash after the old export was moved aside, before the new one
	// was renamed in, and an interrupted export's directory.
	os.Rename(out, filepath.Join(root, ".export.old-x1"))
	os.MkdirAll(filepath.Join(root, ".export.tmp-x2"), 0o755)
	if _, err := Export(m2, tok, out); err != nil {
		t.Fatal(err)
	}
	if second := snapshot(); second["model.safetensors"] == first["model.safetensors"] || second["forge-tokenizer.json"] != first["forge-tokenizer.json"] {
		t.Error("the export after a crash does not hold the new model")
	}
	if l := leftovers(); len(l) != 0 {
		t.Errorf("leftovers of the crash remain: %v", l)
	}
	os.WriteFile(filepath.Join(out, "notes.txt"), []byte("mine"), 0o644)
	if _, err := Export(m1, tok, out); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("export over a directory with the user's files: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "notes.txt")); string(b) != "mine" {
		t.Error("the user's file was lost")
	}
}
