package gpt

import (
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
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
	loss, step := overfit(m, c.Vocab, 64, 300, identity)
	t.Logf("ternary: loss %.4f after %d steps", loss, step)
	if loss >= 0.05 {
		t.Errorf("ternary: loss %.4f after 300 steps, want < 0.05", loss)
	}
}

// TestGenerateQuantised: generation with quantised, pruned weights (which
// computes each effective weight once, not per token) gives the tokens of
// the float model holding those weights, cached and uncached, and leaves
// the layers as they were.
func TestGenerateQuantised(t *testing.T) {
	c := DefaultConfig()
	c.Vocab, c.Context, c.Dim, c.Layers, c.Heads, c.Quant, c.InitStd = 128, 32, 32, 2, 2, "int8", 0.2
	m, _ := New(c, 7)
	if err := nn.PruneByMagnitude(m.Linears()[:2], 0.5); err != nil {
		t.Fatal(err)
	}
	c.Quant = ""
	ref, _ := New(c, 7)
	forge.NoGrad(func() {
		for i, l := range ref.Linears() {
			l.Layer.Weight.CopyFrom(m.Linears()[i].Layer.EffectiveWeight())
		}
	})
	w0, mk0 := m.Blocks[0].Attn.WQKV.Weight, m.Blocks[0].Attn.WQKV.Mask
	opts := GenerateOptions{MaxTokens: 40, Sampling: Sampling{Temperature: 0}}
	want, err := ref.Generate([]int{1, 2, 3}, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, noCache := range []bool{false, true} {
		opts.NoCache = noCache
		got, err := m.Generate([]int{1, 2, 3}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("no cache %v: tokens %v, want %v", noCache, got, want)
		}
	}
	if l := m.Blocks[0].Attn.WQKV; l.Weight != w0 || l.Mask != mk0 || l.Quant != "int8" {
		t.Errorf("generation left the layer changed: quant %q, same weight %v, same mask %v", l.Quant, l.Weight == w0, l.Mask == mk0)
	}
}
