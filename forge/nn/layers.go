package nn

import (
	"fmt"
	"math"
	"slices"

	"github.com/forgeml/forge/forge"
)

// Init draws initial weights: normal(0, std) from one generator, so a seed
// fixes every weight on every backend. With Empty set it draws nothing and
// fills nothing: the parameters' values are unspecified (forge.EmptyOf),
// for a model whose weights are loaded right after it is built.
type Init struct {
	Gen   *forge.Generator
	DType forge.DType
	Empty bool
}

// Normal returns a leaf parameter of the given shape drawn from N(0, std²).
func (in Init) Normal(std float64, shape ...int) *forge.Tensor {
	if in.Empty {
		return forge.EmptyOf(in.dtype(), shape...).RequiresGrad()
	}
	return in.Gen.Randn(in.dtype(), shape...).MulScalar(std).RequiresGrad()
}

// Const returns a leaf parameter filled with v.
func (in Init) Const(v float64, shape ...int) *forge.Tensor {
	if in.Empty {
		return forge.EmptyOf(in.dtype(), shape...).RequiresGrad()
	}
	return forge.FullOf(in.dtype(), v, shape...).RequiresGrad()
}

func (in Init) dtype() forge.DType {
	if in.DType == 0 {
		return forge.Float32
	}
	return in.DType
}

// Linear is y = x·Wᵀ + b over the last axis.
//
// With Compute set to a 16-bit dtype (mixed precision, see
// gpt.Model.SetCompute), the product runs in it: x and the weight (the
// float32 master copy) are cast to Compute, multiplied (accumulated in
// float32 by the backend), and the result is cast back to x's dtype (a
// no-op when x is already 16-bit); the bias is cast to the result's dtype
// and added. The casts carry the gradients back, so the parameters'
// gradients stay in their own dtype. Any other Compute (the zero value is
// Float32) is the plain product in the weight's dtype.
//
// # Masks and quantisation
//
// The product uses EffectiveWeight, built in each forward from the float32
// master weight (the parameter the optimizer updates):
//
//	w = Weight ⊙ Mask              when Mask is set (a fixed 0/1 tensor: pruning)
//	w = forge.FakeQuant(w, Quant)  when Quant is "int8" or "ternary"
//
// then cast to Compute under mixed precision. The mask's product sends
// zero gradient to the pruned entries; SetMask and ApplyMask also zero
// them in the master weight, and the trainer applies the masks after
// every optimizer step (AdamW's moments and decoupled weight decay could
// otherwise move them), so pruned weights are zero in the weight itself,
// its checkpoints and exports, not only in the forward. FakeQuant's
// straight-through estimator hands the gradient of the quantised weight
// to the master weight unchanged.
type Linear struct {
	Weight  *forge.Tensor // (out, in)
	Bias    *forge.Tensor // (out), or nil
	Compute forge.DType   // Float16 or BFloat16: the product's dtype; else the weight's
	Quant   string        // "" or "none", "int8", "ternary": forge.FakeQuant of the weight in each forward
	Mask    *forge.Tensor // (out, in) of 0 and 1, no gradient, or nil: the weight is Weight ⊙ Mask
}

// NewLinear returns a Linear with N(0, std²) weights and zero bias.
func NewLinear(in Init, nIn, nOut int, bias bool, std float64) *Linear {
	l := &Linear{Weight: in.Normal(std, nOut, nIn)}
	if bias {
		l.Bias = in.Const(0, nOut)
	}
	return l
}

// Forward maps x (…, in) to (…, out).
func (l *Linear) Forward(x *forge.Tensor) *forge.Tensor {
	l.check(x)
	w := l.EffectiveWeight()
	var y *forge.Tensor
	if l.mixed() {
		y = x.Cast(l.Compute).MatMul(w.Cast(l.Compute).T()).Cast(x.DType())
	} else {
		y = x.MatMul(w.T())
	}
	if l.Bias != nil {
		y = y.Add(l.Bias.Cast(y.DType()))
	}
	return y
}

// EffectiveWeight is the weight the product uses: Weight ⊙ Mask (when
// masked), fake-quantised under Quant. It is Weight itself with neither.
func (l *Linear) EffectiveWeight() *forge.Tensor {
	return forge.FakeQuant(l.EffectiveMaskedWeight(), l.Quant)
}

// SetMask fixes the layer's pruning mask (nil removes it): a tensor of the
// weight's shape holding only 0 and 1, kept without a gradient on the
// weight's device; the masked entries of the weight are zeroed now. It
// panics on a mask of another shape or with other values.
func (l *Linear) SetMask(mask *forge.Tensor) {
	if mask == nil {
		l.Mask = nil
		return
	}
	if !slices.Equal(mask.Shape(), l.Weight.Shape()) {
		panic(errorf("linear.set_mask", "mask %v does not match the weight %v", mask.Shape(), l.Weight.Shape()))
	}
	var m *forge.Tensor
	forge.NoGrad(func() {
		m = mask.Detach().Cast(l.Weight.DType()).To(l.Weight.Device()).Contiguous().Clone()
		if bad := m.Ne(forge.ZerosLike(m)).Mul(m.Ne(forge.OnesLike(m))).Sum().Item(); bad != 0 {
			panic(errorf("linear.set_mask", "mask %v holds %v values other than 0 and 1", mask.Shape(), bad))
		}
	})
	l.Mask = m
	l.ApplyMask()
}

// ApplyMask zeroes the masked entries of the master weight in place (no
// graph); without a mask it does nothing.
func (l *Linear) ApplyMask() {
	if l.Mask == nil {
		return
	}
	forge.NoGrad(func() { l.Weight.CopyFrom(l.Weight.Mul(l.Mask)) })
}

// Sparsity is the fraction of the weight the mask removes (0 without one).
func (l *Linear) Sparsity() float64 {
	if l.Mask == nil {
		return 0
	}
	var kept float64
	forge.NoGrad(func() { kept = l.Mask.Sum().Item() })
	return 1 - kept/float64(l.Mask.Numel())
}

// mixed reports whether the product runs in another dtype than the weight's.
func (l *Linear) mixed() bool { return l.Compute.IsHalf() && l.Compute != l.Weight.DType() }

// check panics unless x ends in the layer's input features.
func (l *Linear) check(x *forge.Tensor) {
	if nIn := l.Weight.Size(1); x.Dim() == 0 || x.Size(-1) != nIn {
		panic(errorf("linear", "input %v does not end in %d features (weight %v)", x.Shape(), nIn, l.Weight.Shape()))
	}
}

// Params implements Module.
func (l *Linear) Params() []Param {
	ps := []Param{{"weight", l.Weight}}
	if l.Bias != nil {
		ps = append(ps, Param{"bias", l.Bias})
	}
	return ps
}

// Embedding maps int32 ids to rows of a (V, C) table.
type Embedding struct {
	Weight *forge.Tensor // (V, C)
}

// NewEmbedding returns an Embedding with N(0, std²) rows.
func NewEmbedding(in Init, vocab, dim int, std float64) *Embedding {
	return &Embedding{Weight: in.Normal(std, vocab, dim)}
}

// Forward maps ids (…) to (…, C).
func (e *Embedding) Forward(ids *forge.Tensor) *forge.Tensor { return forge.Embedding(ids, e.Weight) }

// Params implements Module.
func (e *Embedding) Params() []Param { return []Param{{"weight", e.Weight}} }

// Norm is a normalisation over the last axis: RMSNorm or LayerNorm.
//
// With Compute set to Float16 or BFloat16 (mixed precision, see
// gpt.Model.SetCompute) the result is stored in that dtype — a float32
// residual stream normalised straight into a 16-bit activation, in float32
// arithmetic with the float32 weights; any other Compute (the zero value
// is Float32) keeps x's dtype.
type Norm struct {
	Kind    string        // "rmsnorm" or "layernorm"
	Weight  *forge.Tensor // (C)
	Bias    *forge.Tensor // (C), LayerNorm only, or nil
	Eps     float64
	Compute forge.DType // Float16 or BFloat16: the result's dtype; else x's
}

// NewRMSNorm returns x/√(mean(x²)+eps)·w with w = 1.
func NewRMSNorm(in Init, dim int, eps float64) *Norm {
	return &Norm{Kind: "rmsnorm", Weight: in.Const(1, dim), Eps: eps}
}

// NewLayerNorm returns (x−mean)/√(var+eps)·w + b with w = 1, b = 0 (b
// only when bias is set).
func NewLayerNorm(in Init, dim int, eps float64, bias bool) *Norm {
	n := &Norm{Kind: "layernorm", Weight: in.Const(1, dim), Eps: eps}
	if bias {
		n.Bias = in.Const(0, dim)
	}
	return n
}

// Forward normalises x (…, C).
func (n *Norm) Forward(x *forge.Tensor) *forge.Tensor {
	dt := x.DType()
	if n.Compute.IsHalf() {
		dt = n.Compute
	}
	if n.Kind == "layernorm" {
		return forge.LayerNormAs(dt, x, n.Weight, n.Bias, n.Eps)
	}
	return forge.RMSNormAs(dt, x, n.Weight, n.Eps)
}

// Params implements Module.
func (n *Norm) Params() []Param {
	ps := []Param{{"weight", n.Weight}}
	if n.Bias != nil {
		ps = append(ps, Param{"bias", n.Bias})
	}
	return ps
}

// KVCache holds one attention layer's keys and values for incremental
// decoding: (B, K, capacity, D) each, the first Len positions filled.
type KVCache struct {
	K, V *forge.Tensor // (B, K, capacity, D)
	Len  int
}

// Attention is causal self-attention with a fused QKV projection: H query
// heads and K key/value heads of dimension D (K < H is grouped-query
// attention), rotary position embeddings on q and k when RoPE is set.
type Attention struct {
	WQKV      *Linear // (H·D + 2·K·D, C)
	WO        *Linear // (C, H·D)
	Heads     int     // H
	KVHeads   int     // K
	HeadDim   int     // D
	RoPE      bool
	RoPETheta float64
}

// AttentionConfig sizes an Attention layer.
type AttentionConfig struct {
	Dim, Heads, KVHeads int
	RoPE                bool
	RoPETheta           float64 // 10000 when zero
	Bias                bool
	Std, OutStd         float64 // init of WQKV and of WO
}

// NewAttention builds an Attention layer; it panics on heads that do not
// divide the dimension (configs are checked before this is reached).
func NewAttention(in Init, c AttentionConfig) *Attention {
	if c.Heads <= 0 || c.Dim%c.Heads != 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 {
		panic(errorf("attention", "dim %d, heads %d, kv heads %d: heads must divide dim and kv heads must divide heads", c.Dim, c.Heads, c.KVHeads))
	}
	d := c.Dim / c.Heads
	theta := c.RoPETheta
	if theta == 0 {
		theta = 10000
	}
	return &Attention{
		WQKV:    NewLinear(in, c.Dim, (c.Heads+2*c.KVHeads)*d, c.Bias, c.Std),
		WO:      NewLinear(in, c.Heads*d, c.Dim, c.Bias, c.OutStd),
		Heads:   c.Heads,
		KVHeads: c.KVHeads, HeadDim: d, RoPE: c.RoPE, RoPETheta: theta,
	}
}

// Forward attends x (B, T, C) causally. With a cache, x holds the T new
// positions after cache.Len earlier ones; their keys and values are
// appended to the cache.
func (a *Attention) Forward(x *forge.Tensor, cache *KVCache) *forge.Tensor {
	if x.Dim() != 3 {
		panic(errorf("attention", "input must be (B, T, C), got %v", x.Shape()))
	}
	B, T := x.Size(0), x.Size(1)
	H, K, D := a.Heads, a.KVHeads, a.HeadDim
	qkv := a.WQKV.Forward(x) // (B, T, (H+2K)·D)
	var q, k, v *forge.Tensor
	if H == K {
		all := qkv.Reshape(B, T, 3, H, D).Permute(2, 0, 3, 1, 4) // (3, B, H, T, D)
		q, k, v = all.Index(0, 0), all.Index(0, 1), all.Index(0, 2)
	} else {
		parts := qkv.Split(2, H*D, K*D, K*D)
		q = parts[0].Reshape(B, T, H, D).Transpose(1, 2) // (B, H, T, D)
		k = parts[1].Reshape(B, T, K, D).Transpose(1, 2) // (B, K, T, D)
		v = parts[2].Reshape(B, T, K, D).Transpose(1, 2)
	}
	pos0 := 0
	if cache != nil {
		pos0 = cache.Len
	}
	if a.RoPE {
		q, k = forge.RoPETheta(q, pos0, a.RoPETheta), forge.RoPETheta(k, pos0, a.RoPETheta)
	}
	if cache != nil {
		if cache.K == nil || cache.K.Size(0) != B || cache.K.Size(1) != K || cache.K.Size(3) != D {
			panic(errorf("attention", "KV cache does not fit input %v (cache %v)", x.Shape(), shapeOf(cache.K)))
		}
		if pos0+T > cache.K.Size(2) {
			panic(errorf("attention", "KV cache full: %d cached + %d new positions > capacity %d", pos0, T, cache.K.Size(2)))
		}
		forge.NoGrad(func() {
			cache.K.Narrow(2, pos0, T).CopyFrom(k)
			cache.V.Narrow(2, pos0, T).CopyFrom(v)
		})
		cache.Len += T
		k, v = cache.K.Narrow(2, 0, cache.Len), cache.V.Narrow(2, 0, cache.Len)
	}
	y := forge.Attention(q, k, v, true)                       // (B, H, T, D)
	return a.WO.Forward(y.Transpose(1, 2).Reshape(B, T, H*D)) // (B, T, C)
}

// NewCache returns an empty KV cache for batch b and capacity positions.
func (a *Attention) NewCache(b, capacity int, dt forge.DType) *KVCache {
	return &KVCache{
		K: forge.ZerosOf(dt, b, a.KVHeads, capacity, a.HeadDim),
		V: forge.ZerosOf(dt, b, a.KVHeads, capacity, a.HeadDim),
	}
}

// Params implements Module.
func (a *Attention) Params() []Param {
	return append(Prefix("wqkv", a.WQKV.Params()), Prefix("wo", a.WO.Params())...)
}

// Linears implements LinearLister.
func (a *Attention) Linears() []NamedLinear {
	return []NamedLinear{{"wqkv", a.WQKV}, {"wo", a.WO}}
}

func shapeOf(t *forge.Tensor) []int {
	if t == nil {
		return nil
	}
	return t.Shape()
}

// MLP is the feed-forward layer: SwiGLU, down(silu(gate(x)) ⊙ up(x)), or
// GELU, down(gelu(up(x))) with the tanh approximation.
type MLP struct {
	Kind string  // "swiglu" or "gelu"
	Gate *Linear // (F, C), SwiGLU only
	Up   *Linear // (F, C)
	Down *Linear // (C, F)
}

// NewMLP builds an MLP of hidden size f; outStd initialises Down.
func NewMLP(in Init, kind string, dim, f int, bias bool, std, outStd float64) *MLP {
	m := &MLP{Kind: kind}
	if kind == "swiglu" {
		m.Gate = NewLinear(in, dim, f, bias, std)
	}
	m.Up = NewLinear(in, dim, f, bias, std)
	m.Down = NewLinear(in, f, dim, bias, outStd)
	return m
}

// Forward maps x (…, C) to (…, C).
func (m *MLP) Forward(x *forge.Tensor) *forge.Tensor {
	if m.Kind == "swiglu" {
		// The gate and up projections are independent: one launch runs
		// them side by side.
		m.Gate.check(x)
		var g, u *forge.Tensor
		switch dt := m.Gate.Compute; {
		case !m.Gate.mixed() && !m.Up.mixed():
			g, u = forge.MatMulPair(x, m.Gate.EffectiveWeight().T(), x, m.Up.EffectiveWeight().T())
		case m.Up.Compute == dt:
			// Mixed precision: both products in dt, cast back to x's
			// dtype (a no-op when x is already 16-bit, as a norm's
			// output under gpt.Model.SetCompute is).
			xc := x.Cast(dt)
			g, u = forge.MatMulPair(xc, m.Gate.EffectiveWeight().Cast(dt).T(), xc, m.Up.EffectiveWeight().Cast(dt).T())
			g, u = g.Cast(x.DType()), u.Cast(x.DType())
		default:
			return m.Down.Forward(forge.SwiGLU(m.Gate.Forward(x), m.Up.Forward(x)))
		}
		if m.Gate.Bias != nil {
			g, u = g.Add(m.Gate.Bias.Cast(g.DType())), u.Add(m.Up.Bias.Cast(u.DType()))
		}
		return m.Down.Forward(forge.SwiGLU(g, u))
	}
	return m.Down.Forward(m.Up.Forward(x).GELU())
}

// Params implements Module.
func (m *MLP) Params() []Param {
	var ps []Param
	if m.Gate != nil {
		ps = append(ps, Prefix("w_gate", m.Gate.Params())...)
	}
	ps = append(ps, Prefix("w_up", m.Up.Params())...)
	return append(ps, Prefix("w_down", m.Down.Params())...)
}

// Linears implements LinearLister.
func (m *MLP) Linears() []NamedLinear {
	var ls []NamedLinear
	if m.Gate != nil {
		ls = append(ls, NamedLinear{"w_gate", m.Gate})
	}
	return append(ls, NamedLinear{"w_up", m.Up}, NamedLinear{"w_down", m.Down})
}

// Block is a pre-norm transformer block:
//
//	x = x + drop(attn(norm1(x)))
//	x = x + drop(mlp(norm2(x)))
//
// The feed-forward branch is MLP, or MoE (a mixture of experts) when that
// is set; either is named "mlp" in Params.
type Block struct {
	Norm1, Norm2 *Norm
	Attn         *Attention
	MLP          *MLP             // the feed-forward layer, or nil when MoE is set
	MoE          *MoE             // a mixture-of-experts feed-forward layer instead of MLP, or nil
	Dropout      float64          // residual dropout while training
	Gen          *forge.Generator // dropout masks
	Training     bool
}

// Forward maps x (B, T, C) to (B, T, C). The branches' outputs are cast
// to the residual stream's dtype before they are added (a no-op unless
// mixed precision runs the branches in 16 bits).
func (b *Block) Forward(x *forge.Tensor, cache *KVCache) *forge.Tensor {
	x = x.Add(b.drop(b.Attn.Forward(b.Norm1.Forward(x), cache).Cast(x.DType())))
	return x.Add(b.drop(b.ffn(b.Norm2.Forward(x)).Cast(x.DType())))
}

// ffn is the feed-forward branch: the MoE when there is one, else the MLP.
func (b *Block) ffn(x *forge.Tensor) *forge.Tensor {
	if b.MoE != nil {
		return b.MoE.Forward(x)
	}
	return b.MLP.Forward(x)
}

func (b *Block) drop(x *forge.Tensor) *forge.Tensor {
	if !b.Training || b.Dropout == 0 {
		return x
	}
	return forge.Dropout(x, b.Dropout, b.Gen)
}

// Params implements Module.
func (b *Block) Params() []Param {
	ps := Prefix("norm1", b.Norm1.Params())
	ps = append(ps, Prefix("attn", b.Attn.Params())...)
	ps = append(ps, Prefix("norm2", b.Norm2.Params())...)
	if b.MoE != nil {
		return append(ps, Prefix("mlp", b.MoE.Params())...)
	}
	return append(ps, Prefix("mlp", b.MLP.Params())...)
}

// Linears implements LinearLister.
func (b *Block) Linears() []NamedLinear {
	ls := PrefixLinears("attn", b.Attn.Linears())
	if b.MoE != nil {
		// The experts' layers (mlp.experts.{e}.w_up, …); the router stays
		// float32 and unpruned.
		for e, ex := range b.MoE.Experts {
			ls = append(ls, PrefixLinears(fmt.Sprintf("mlp.experts.%d", e), ex.Linears())...)
		}
		return ls
	}
	return append(ls, PrefixLinears("mlp", b.MLP.Linears())...)
}

// ResidualStd is the initial standard deviation of the projections that
// write into the residual stream (attention output, MLP down): std/√(2L).
func ResidualStd(std float64, layers int) float64 { return std / math.Sqrt(2*float64(layers)) }
