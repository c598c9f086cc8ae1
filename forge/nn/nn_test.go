package nn

import (
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

func maxDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

func TestLinearMatchesLoops(t *testing.T) {
	in := Init{Gen: forge.NewGenerator(1)}
	l := NewLinear(in, 3, 2, true, 1)
	forge.NoGrad(func() { l.Bias.CopyFrom(forge.FromSlice([]float32{0.5, -1})) })
	x := forge.FromSlice([]float32{1, 2, 3, -1, 0, 2}, 2, 3)
	y := l.Forward(x).Float32s()
	w := l.Weight.Float32s() // (out, in)
	b := []float32{0.5, -1}
	xs := x.Float32s()
	for r := range 2 {
		for o := range 2 {
			want := b[o]
			for i := range 3 {
				want += xs[r*3+i] * w[o*3+i]
			}
			if math.Abs(float64(y[r*2+o]-want)) > 1e-6 {
				t.Errorf("y[%d,%d] = %g, want %g", r, o, y[r*2+o], want)
			}
		}
	}
	if err := forge.Try(func() { l.Forward(forge.Zeros(2, 4)) }); err == nil || !strings.Contains(err.Error(), "nn.linear") {
		t.Errorf("wrong width: %v", err)
	}
}

// Grouped-query attention must equal multi-head attention whose key and
// value heads are the shared ones repeated.
func TestGQAEqualsRepeatedHeads(t *testing.T) {
	in := Init{Gen: forge.NewGenerator(2)}
	const B, T, C, H, K = 2, 5, 16, 4, 2
	gqa := NewAttention(in, AttentionConfig{Dim: C, Heads: H, KVHeads: K, RoPE: true, Std: 0.3, OutStd: 0.3})
	D := C / H
	// The MHA twin: q rows as they are, k and v rows of head h/(H/K).
	parts := gqa.WQKV.Weight.Split(0, H*D, K*D, K*D)
	rep := func(w *forge.Tensor) *forge.Tensor {
		var hs []*forge.Tensor
		for h := range H {
			hs = append(hs, w.Narrow(0, (h/(H/K))*D, D))
		}
		return forge.Concat(0, hs...)
	}
	mha := &Attention{
		WQKV: &Linear{Weight: forge.Concat(0, parts[0], rep(parts[1]), rep(parts[2])).Detach()},
		WO:   gqa.WO, Heads: H, KVHeads: H, HeadDim: D, RoPE: true, RoPETheta: 10000,
	}
	x := forge.NewGenerator(3).Randn(forge.Float32, B, T, C)
	a, b := gqa.Forward(x, nil).Float32s(), mha.Forward(x, nil).Float32s()
	if d := maxDiff(a, b); d > 1e-5 {
		t.Errorf("GQA and repeated-head MHA differ by %g", d)
	}
}

// Feeding positions one at a time through the KV cache must give the
// outputs of the whole sequence at once.
func TestKVCacheMatchesFullSequence(t *testing.T) {
	in := Init{Gen: forge.NewGenerator(4)}
	for _, kv := range []int{4, 2, 1} {
		a := NewAttention(in, AttentionConfig{Dim: 16, Heads: 4, KVHeads: kv, RoPE: true, Std: 0.3, OutStd: 0.3})
		x := forge.NewGenerator(5).Randn(forge.Float32, 1, 7, 16)
		var full, step []float32
		forge.NoGrad(func() {
			full = a.Forward(x, nil).Float32s()
			c := a.NewCache(1, 8, forge.Float32)
			step = append(step, a.Forward(x.Narrow(1, 0, 3), c).Float32s()...) // a prefill of 3
			for p := 3; p < 7; p++ {
				step = append(step, a.Forward(x.Narrow(1, p, 1), c).Float32s()...)
			}
			if c.Len != 7 {
				t.Errorf("cache holds %d positions, want 7", c.Len)
			}
			if err := forge.Try(func() { a.Forward(x.Narrow(1, 0, 2), c) }); err == nil || !strings.Contains(err.Error(), "KV cache full") {
				t.Errorf("overfull cache: %v", err)
			}
		})
		if d := maxDiff(full, step); d > 1e-5 {
			t.Errorf("kv heads %d: cached decoding differs from the full pass by %g", kv, d)
		}
	}
}

func TestNamesAndMatch(t *testing.T) {
	in := Init{Gen: forge.NewGenerator(6)}
	blocks := Sequence[*Block]{}
	for range 2 {
		blocks = append(blocks, &Block{
			Norm1: NewRMSNorm(in, 8, 1e-5), Norm2: NewLayerNorm(in, 8, 1e-5, true),
			Attn: NewAttention(in, AttentionConfig{Dim: 8, Heads: 2, KVHeads: 2, Std: 0.02, OutStd: 0.01}),
			MLP:  NewMLP(in, "gelu", 8, 32, false, 0.02, 0.01),
		})
	}
	var names []string
	for _, p := range Prefix("blocks", blocks.Params()) {
		names = append(names, p.Name)
	}
	want := "blocks.0.norm1.weight blocks.0.attn.wqkv.weight blocks.0.attn.wo.weight blocks.0.norm2.weight blocks.0.norm2.bias blocks.0.mlp.w_up.weight blocks.0.mlp.w_down.weight"
	if got := strings.Join(names[:7], " "); got != want {
		t.Errorf("names:\n got %s\nwant %s", got, want)
	}
	if n := len(Match(blocks, "*.attn.*")); n != 4 {
		t.Errorf("*.attn.* matched %d", n)
	}
	if n := len(Match(blocks, "norm2")); n != 4 {
		t.Errorf("substring norm2 matched %d", n)
	}
	if Count(blocks) != 2*(8+3*8*8+8*8+8+8+32*8+8*32) {
		t.Errorf("count %d", Count(blocks))
	}
}
