package gpt

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// ckptGrads trains nothing: one forward and backward of c (seeded) on a
// fixed batch, in compute dtype dt, returning the loss and every
// parameter's gradient by name.
func ckptGrads(t *testing.T, c Config, dt forge.DType) (float64, map[string][]float32) {
	t.Helper()
	m, err := New(c, 5)
	if err != nil {
		t.Fatal(err)
	}
	if dt != forge.Float32 {
		if err := m.SetCompute(dt); err != nil {
			t.Skip(err)
		}
	}
	m.SetTraining(true) // dropout on
	g := forge.NewGenerator(6)
	ids, tgt := randIDs(g, c.Vocab, 2, c.Context), randIDs(g, c.Vocab, 2, c.Context)
	loss := m.Loss(ids, tgt)
	loss.Backward()
	grads := map[string][]float32{}
	for _, p := range m.Params() {
		grads[p.Name] = p.Tensor.Grad().Float32s()
	}
	return loss.Item(), grads
}

// TestCheckpointGradientsEqual: a tiny GPT with dropout on, its blocks
// checkpointed (all, or some), gives the loss and every parameter's
// gradient of the plain model bit for bit (==), on whatever device the
// tests run (FORGE_BACKEND=metal-emu runs the Metal kernels; there
// bfloat16 mixed precision too).
func TestCheckpointGradientsEqual(t *testing.T) {
	base := testConfig()
	base.Layers, base.Dropout = 3, 0.2
	gpt2 := variants()["gpt2"]
	gpt2.Layers, gpt2.Dropout = 3, 0.1
	dts := []forge.DType{forge.Float32}
	if forge.DefaultDevice().Name() != "cpu" {
		dts = append(dts, forge.BFloat16)
	}
	t.Logf("device %s", forge.DefaultDevice().Describe())
	for name, c := range map[string]Config{"base": base, "gpt2": gpt2} {
		for _, dt := range dts {
			wantLoss, want := ckptGrads(t, c, dt)
			for _, ck := range []Blocks{AllBlocks(), BlockList(2, 0)} {
				cc := c
				cc.Checkpoint = ck
				loss, got := ckptGrads(t, cc, dt)
				if loss != wantLoss {
					t.Errorf("%s %v checkpoint %v: loss %v, want %v", name, dt, ck, loss, wantLoss)
				}
				for p, w := range want {
					for j := range w {
						if got[p][j] != w[j] {
							t.Fatalf("%s %v checkpoint %v: %s[%d] = %v, want %v", name, dt, ck, p, j, got[p][j], w[j])
						}
					}
				}
			}
		}
	}
}

// TestCheckpointConfig: checkpoint_activations reads true, false or a
// list of indices, round-trips, and refuses anything else in one line.
func TestCheckpointConfig(t *testing.T) {
	ok := map[string]string{
		`{}`:                                            "false",
		`{"checkpoint_activations": false}`:             "false",
		`{"checkpoint_activations": true}`:              "true",
		`{"checkpoint_activations": [5, 0, 2]}`:         "[0,2,5]",
		`{"checkpoint_activations": []}`:                "false",
		`{"n_layer": 2, "checkpoint_activations": [1]}`: "[1]",
	}
	for in, want := range ok {
		c, err := ParseConfig([]byte(in))
		if err != nil {
			t.Errorf("ParseConfig(%s): %v", in, err)
			continue
		}
		if got := c.Checkpoint.String(); got != want {
			t.Errorf("ParseConfig(%s): checkpoint %s, want %s", in, got, want)
		}
		b, _ := json.Marshal(c)
		if c2, err := ParseConfig(b); err != nil || c2 != c {
			t.Errorf("%s: the round trip through %s gave %v, %v", in, b, c2.Checkpoint, err)
		}
		if want == "false" && strings.Contains(string(b), "checkpoint") {
			t.Errorf("%s: none is written as %s; want it left out", in, b)
		}
	}
	bad := map[string]string{
		`{"checkpoint_activations": [6]}`:        "block 6 is out of range: the model has 6 blocks (0..5)",
		`{"checkpoint_activations": [-1]}`:       "block -1: indices start at 0",
		`{"checkpoint_activations": [1, 1]}`:     "block 1 is listed twice",
		`{"checkpoint_activations": "yes"}`:      `want true, false or a list of block indices such as [0, 2, 5], got "yes"`,
		`{"checkpoint_activations": [1.5]}`:      "want true, false or a list of block indices",
		`{"checkpoint_activations": {"all": 1}}`: "want true, false or a list of block indices",
	}
	for in, want := range bad {
		_, err := ParseConfig([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseConfig(%s) = %v, want one line containing %q", in, err, want)
		}
	}
	c := DefaultConfig()
	if c.Checkpoint.Has(0) || !AllBlocks().Has(5) || !BlockList(0, 3).Has(3) || BlockList(0, 3).Has(1) {
		t.Error("Blocks.Has is wrong")
	}
	if n := BlockList(0, 3, 7).Count(6); n != 2 {
		t.Errorf("Count(6) of [0,3,7] = %d, want 2", n)
	}
}

// TestCheckpointRefusesMoE: a MoE block's load-balancing loss would not
// reach the gradient through a checkpoint, so the combination is refused.
func TestCheckpointRefusesMoE(t *testing.T) {
	c := DefaultConfig()
	c.Experts, c.Checkpoint = 4, AllBlocks()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "not supported yet") {
		t.Fatalf("MoE with checkpointing: %v", err)
	}
}
