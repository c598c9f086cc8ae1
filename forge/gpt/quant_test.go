package gpt

import (
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
)

func TestQuantConfig(t *testing.T) {
	for _, q := range []string{"", "none", "int8", "ternary"} {
		c, err := ParseConfig([]byte(`{"vocab": 64, "context": 8, "d_model": 16, "n_layer": 2, "n_head": 2, "untied": true, "quant": "` + q + `"}`))
		if err != nil {
			t.Fatalf("quant %q: %v", q, err)
		}
		m, err := New(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		ls := m.Linears()
		if len(ls) != 2*5+1 || ls[0].Name != "blocks.0.attn.wqkv" || ls[len(ls)-1].Name != "head" {
			t.Fatalf("linears %d, first %q, last %q", len(ls), ls[0].Name, ls[len(ls)-1].Name)
		}
		for _, l := range ls[:len(ls)-1] {
			if l.Layer.Quant != q {
				t.Errorf("quant %q: %s has %q", q, l.Name, l.Layer.Quant)
			}
		}
		if m.Head.Quant != "" {
			t.Errorf("the untied head is quantised (%q)", m.Head.Quant)
		}
		s := nn.Summarize(m).String()
		if has := strings.Contains(s, "blocks.1.mlp.w_down.weight") && strings.Contains(s, "  "+q+"\n"); has != (q == "int8" || q == "ternary") {
			t.Errorf("quant %q: summary notes:\n%s", q, s)
		}
	}
	if _, err := ParseConfig([]byte(`{"quant": "int4"}`)); err == nil || !strings.Contains(err.Error(), "int4") {
		t.Errorf("quant int4: %v", err)
	}
}

// TestQuantForwardUsesQuantisedWeights: the int8 and ternary models'
// logits equal those of the float model whose block weights are replaced
// by their fake-quantised values, bit for bit.
func TestQuantForwardUsesQuantisedWeights(t *testing.T) {
	for _, q := range []string{"int8", "ternary"} {
		c := DefaultConfig()
		c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.Quant = 128, 16, 32, 2, 2, q
		m, _ := New(c, 7)
		c.Quant = ""
		ref, _ := New(c, 7)
		forge.NoGrad(func() {
			for _, l := range ref.BlockLinears() {
				l.Layer.Weight.CopyFrom(forge.FakeQuant(l.Layer.Weight, q))
			}
		})
		ids := randIDs(forge.NewGenerator(3), c.Vocab, 2, 16)
		a, b := m.Forward(ids, nil).Float32s(), ref.Forward(ids, nil).Float32s()
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: logit %d = %v, want %v", q, i, a[i], b[i])
			}
		}
	}
}

// TestOverfitOneBatchTernary: the tiny model with ternary weights still
// memorises one batch (the float model needs < 150 steps for 0.05).
func TestOverfitOneBatchTernary(t *testing.T) {
	if testing.Short() {
		t.Skip("trains for a few seconds")
	}
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.FFNHidden = 512, 128, 128, 4, 4, 512 // tiny
	c.Quant = "ternary"
	m, _ := New(c, 1)
	g := forge.NewGenerator(2)
	data := randIDs(g, c.Vocab, 4, 65)
	ids, tgt := data.Narrow(1, 0, 64).Contiguous(), data.Narrow(1, 1, 64).Contiguous()
	cfg := optim.DefaultAdamWConfig()
	cfg.LR = 3e-3
	opt := optim.NewAdamWGroups(optim.DecayGroups(nn.Tensors(m), 0.1), cfg)
	var loss float64
	step := 0
	for step = 1; step <= 300; step++ {
		opt.ZeroGrad()
		l := m.Loss(ids, tgt)
		l.Backward()
		optim.ClipGradNorm(nn.Tensors(m), 1)
		opt.Step()
		if loss = l.Item(); loss < 0.05 {
			break
		}
	}
	t.Logf("ternary: loss %.4f after %d steps", loss, step)
	if loss >= 0.05 {
		t.Errorf("ternary: loss %.4f after 300 steps, want < 0.05", loss)
	}
}
