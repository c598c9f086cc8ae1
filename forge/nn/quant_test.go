package nn

import (
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

// TestLinearQuantAndMaskForward: a quantised, masked Linear computes
// exactly what a plain Linear holding FakeQuant(W ⊙ M) computes, and its
// weight's gradient is that plain layer's weight gradient times the mask
// (the STE passes it through the quantiser, the mask's product stops it
// at pruned entries) — bit for bit, the same kernels running on the same
// values.
func TestLinearQuantAndMaskForward(t *testing.T) {
	for _, mode := range []string{forge.QuantInt8, forge.QuantTernary} {
		in := Init{Gen: forge.NewGenerator(3)}
		l := NewLinear(in, 12, 8, true, 0.1)
		x := forge.NewGenerator(4).Randn(forge.Float32, 5, 12)
		up := forge.NewGenerator(5).Randn(forge.Float32, 5, 8)
		mask := make([]float32, 8*12)
		for i := range mask {
			mask[i] = float32((i / 3) % 2)
		}
		l.SetMask(forge.FromSlice(mask, 8, 12))
		l.Quant = mode

		var q *forge.Tensor
		forge.NoGrad(func() { q = forge.FakeQuant(l.Weight.Mul(l.Mask), mode).Clone() })
		ref := &Linear{Weight: q.RequiresGrad(), Bias: l.Bias.Detach().Clone().RequiresGrad()}

		l.Forward(x).Mul(up).Sum().Backward()
		ref.Forward(x).Mul(up).Sum().Backward()
		y, yr := l.Forward(x).Float32s(), ref.Forward(x).Float32s()
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(yr[i]) {
				t.Fatalf("%s: y[%d] = %v, want %v", mode, i, y[i], yr[i])
			}
		}
		g, gr := l.Weight.Grad().Float32s(), ref.Weight.Grad().Float32s()
		for i := range g {
			if g[i] != gr[i]*mask[i] {
				t.Fatalf("%s: grad[%d] = %v, want %v·mask %v", mode, i, g[i], gr[i], mask[i])
			}
		}
		// Levels: int8 has up to 255 values per row, ternary three.
		lv, _ := forge.Quantize(l.Weight.Mul(l.Mask), mode)
		seen := map[float32]bool{}
		for _, v := range lv.Float32s() {
			seen[v] = true
		}
		if mode == forge.QuantTernary && len(seen) != 3 {
			t.Errorf("ternary levels %v", seen)
		}
	}
}

func TestSetMaskChecks(t *testing.T) {
	l := NewLinear(Init{Gen: forge.NewGenerator(1)}, 3, 2, false, 1)
	if err := forge.Try(func() { l.SetMask(forge.Ones(3, 2)) }); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("wrong shape: %v", err)
	}
	if err := forge.Try(func() { l.SetMask(forge.Full(0.5, 2, 3)) }); err == nil || !strings.Contains(err.Error(), "other than 0 and 1") {
		t.Errorf("non-binary mask: %v", err)
	}
	l.SetMask(forge.FromSlice([]float32{1, 0, 1, 0, 0, 1}, 2, 3))
	w := l.Weight.Float32s()
	if w[1] != 0 || w[3] != 0 || w[4] != 0 || w[0] == 0 {
		t.Errorf("SetMask did not zero the masked weights: %v", w)
	}
	if got := l.Sparsity(); got != 0.5 {
		t.Errorf("sparsity %v, want 0.5", got)
	}
}

// TestPruneByMagnitude: the k smallest magnitudes of each layer go, ties
// by position, and pruning again extends the mask.
func TestPruneByMagnitude(t *testing.T) {
	a := &Linear{Weight: forge.FromSlice([]float32{0.3, -0.1, 0.2, -0.2, 0.05, 0.4, -0.6, 0.2}, 2, 4).RequiresGrad()}
	b := &Linear{Weight: forge.FromSlice([]float32{5, -4, 3, 2}, 2, 2).RequiresGrad()}
	ls := []NamedLinear{{"a", a}, {"b", b}}
	if err := PruneByMagnitude(ls, 0.5); err != nil {
		t.Fatal(err)
	}
	// a: |w| sorted 0.05, 0.1, 0.2 (index 2), 0.2 (index 3) go; 0.2 at 7 stays.
	wantA := []float32{1, 0, 0, 0, 0, 1, 1, 1}
	wantB := []float32{1, 1, 0, 0} // per layer: b loses its own two smallest
	for i, v := range a.Mask.Float32s() {
		if v != wantA[i] {
			t.Fatalf("mask a %v, want %v", a.Mask.Float32s(), wantA)
		}
	}
	for i, v := range b.Mask.Float32s() {
		if v != wantB[i] {
			t.Fatalf("mask b %v, want %v", b.Mask.Float32s(), wantB)
		}
	}
	if err := PruneByMagnitude(ls[:1], 0.75); err != nil {
		t.Fatal(err)
	}
	if got := a.Sparsity(); got != 0.75 {
		t.Errorf("after pruning to 75%%: sparsity %v", got)
	}
	if w := a.Weight.Float32s(); w[0] != 0 || w[7] != 0 || w[6] == 0 || w[5] == 0 {
		t.Errorf("after pruning to 75%%: weights %v (want 0.3 and 0.2 at 0 and 7 removed)", w)
	}
	if err := PruneByMagnitude(ls, 1.5); err == nil {
		t.Errorf("sparsity 1.5 accepted")
	}
	s := Summarize(namedLinears{ls}).String()
	if !strings.Contains(s, "mask 75.0%") || !strings.Contains(s, "mask 50.0%") || !strings.Contains(s, "notes") {
		t.Errorf("summary lacks the masks:\n%s", s)
	}
	a.Quant = forge.QuantTernary
	if s := Summarize(namedLinears{ls}).String(); !strings.Contains(s, "ternary, mask 75.0%") {
		t.Errorf("summary lacks the quantiser:\n%s", s)
	}
}

// namedLinears is a module of a few Linears.
type namedLinears struct{ ls []NamedLinear }

func (n namedLinears) Linears() []NamedLinear { return n.ls }

func (n namedLinears) Params() []Param {
	var ps []Param
	for _, l := range n.ls {
		ps = append(ps, Prefix(l.Name, l.Layer.Params())...)
	}
	return ps
}
