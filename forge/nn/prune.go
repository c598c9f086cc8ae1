package nn

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/forgeml/forge/forge"
)

// NamedLinear is one Linear of a module tree and its dotted name (its
// weight is the parameter Name + ".weight").
type NamedLinear struct {
	Name  string
	Layer *Linear
}

// LinearLister is a module that lists its Linear layers, in Params order.
type LinearLister interface {
	Linears() []NamedLinear
}

// PrefixLinears returns ls with "prefix." prepended to every name.
func PrefixLinears(prefix string, ls []NamedLinear) []NamedLinear {
	out := make([]NamedLinear, len(ls))
	for i, l := range ls {
		out[i] = NamedLinear{Name: prefix + "." + l.Name, Layer: l.Layer}
	}
	return out
}

// PruneByMagnitude masks, in each layer separately, the fraction sparsity
// of its weight with the smallest magnitudes: round(sparsity·n) of its n
// entries, ties broken by position (row-major, earlier first), so the
// result depends only on the weights. Entries an earlier mask removed
// count as magnitude 0 and stay removed, so pruning again to a higher
// sparsity extends the mask. Per layer, not global: every layer keeps the
// same share of its weights, which keeps small layers (a narrow output
// projection) from being emptied by a global threshold.
func PruneByMagnitude(ls []NamedLinear, sparsity float64) error {
	if !(sparsity >= 0 && sparsity <= 1) {
		return fmt.Errorf("nn: prune: sparsity %v: want a fraction in [0, 1]", sparsity)
	}
	for _, nl := range ls {
		l := nl.Layer
		var w []float32
		forge.NoGrad(func() { w = l.EffectiveMaskedWeight().Cast(forge.Float32).Contiguous().Float32s() })
		n := len(w)
		k := int(math.Round(sparsity * float64(n)))
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmp.Compare(math.Abs(float64(w[a])), math.Abs(float64(w[b])))
		})
		mask := make([]float32, n)
		for i := range mask {
			mask[i] = 1
		}
		for _, i := range idx[:k] {
			mask[i] = 0
		}
		if l.Mask != nil {
			old := l.Mask.Cast(forge.Float32).Float32s()
			for i := range mask {
				mask[i] *= old[i]
			}
		}
		l.SetMask(forge.FromSlice(mask, l.Weight.Shape()...))
	}
	return nil
}

// EffectiveMaskedWeight is Weight ⊙ Mask (Weight without a mask), before
// quantisation.
func (l *Linear) EffectiveMaskedWeight() *forge.Tensor {
	if l.Mask == nil {
		return l.Weight
	}
	return l.Weight.Mul(l.Mask)
}

// ApplyMasks zeroes the masked entries of every layer's master weight (see
// Linear.ApplyMask); the trainer calls it after each optimizer step.
func ApplyMasks(ls []NamedLinear) {
	for _, l := range ls {
		l.Layer.ApplyMask()
	}
}

// SetQuant sets every layer's fake quantiser (forge.FakeQuant's modes).
func SetQuant(ls []NamedLinear, mode string) error {
	if !forge.ValidQuant(mode) {
		return fmt.Errorf("nn: quant %q: want \"none\", %q or %q", mode, forge.QuantInt8, forge.QuantTernary)
	}
	for _, l := range ls {
		l.Layer.Quant = mode
	}
	return nil
}
