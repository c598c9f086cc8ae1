package gpt

import (
	"fmt"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
)

// Model is a GPT. Parameter names (Params) are:
//
//	wte.weight                       (Vp, C) token embedding, also the head when tied
//	wpe.weight                       (T, C)  learned positions only
//	blocks.{i}.norm1.weight          (C)
//	blocks.{i}.attn.wqkv.weight      ((H+2K)·D, C)
//	blocks.{i}.attn.wo.weight        (C, H·D)
//	blocks.{i}.norm2.weight          (C)
//	blocks.{i}.mlp.w_gate.weight     (F, C)  SwiGLU only
//	blocks.{i}.mlp.w_up.weight       (F, C)
//	blocks.{i}.mlp.w_down.weight     (C, F)
//	norm_f.weight                    (C)
//	head.weight                      (Vp, C) untied only
//
// plus ".bias" companions when Config.Bias is set. With a mixture of
// experts (n_experts E > 1) each block's mlp is an nn.MoE instead:
//
//	blocks.{i}.mlp.router.weight              (E, C)  no bias
//	blocks.{i}.mlp.experts.{e}.w_gate.weight  (F, C)  SwiGLU only, e = 0..E−1
//	blocks.{i}.mlp.experts.{e}.w_up.weight    (F, C)
//	blocks.{i}.mlp.experts.{e}.w_down.weight  (C, F)
//
// and Loss adds moe_aux_coef times the sum over blocks of their
// load-balancing losses when it records gradients (RouterStats has the
// routing).
type Model struct {
	Config Config // resolved
	Wte    *nn.Embedding
	Wpe    *nn.Embedding // learned positions, or nil
	Blocks nn.Sequence[*nn.Block]
	NormF  *nn.Norm
	Head   *nn.Linear // untied head, or nil

	gen      *forge.Generator // dropout masks
	training bool
	compute  forge.DType // dtype of the activations and matmuls (SetCompute): Float32 (the zero value) or 16-bit
}

// New builds a model with weights drawn from seed.
func New(cfg Config, seed uint64) (*Model, error) {
	return build(cfg, seed, nn.Init{Gen: forge.NewGenerator(seed)})
}

// NewEmpty builds a model of cfg's shape whose weights are unspecified
// (nn.Init.Empty): nothing is drawn or filled, for a model whose weights
// are loaded (or mapped) right after. Its dropout generator is seed's,
// as New's.
func NewEmpty(cfg Config, seed uint64) (*Model, error) {
	return build(cfg, seed, nn.Init{Empty: true})
}

func build(cfg Config, seed uint64, in nn.Init) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.Resolved()
	std, res := c.InitStd, nn.ResidualStd(c.InitStd, c.Layers)
	V, C := c.PaddedVocab(), c.Dim
	m := &Model{Config: c, gen: forge.NewGenerator(seed ^ 0x9e3779b97f4a7c15)}
	m.Wte = nn.NewEmbedding(in, V, C, std)
	if c.Position == "learned" {
		m.Wpe = nn.NewEmbedding(in, c.Context, C, std)
	}
	norm := func() *nn.Norm {
		if c.Norm == "layernorm" {
			return nn.NewLayerNorm(in, C, c.NormEps, c.Bias)
		}
		return nn.NewRMSNorm(in, C, c.NormEps)
	}
	for range c.Layers {
		b := &nn.Block{
			Norm1: norm(),
			Attn: nn.NewAttention(in, nn.AttentionConfig{
				Dim: C, Heads: c.Heads, KVHeads: c.KVHeads,
				RoPE: c.Position == "rope", RoPETheta: c.RoPETheta,
				Bias: c.Bias, Std: std, OutStd: res,
			}),
			Norm2:   norm(),
			Dropout: c.Dropout, Gen: m.gen,
		}
		if c.MoE() {
			b.MoE = nn.NewMoE(in, c.MLP, C, c.FFNHidden, c.Experts, c.TopK, c.Bias, std, res)
		} else {
			b.MLP = nn.NewMLP(in, c.MLP, C, c.FFNHidden, c.Bias, std, res)
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.NormF = norm()
	if c.Untied {
		m.Head = nn.NewLinear(in, C, V, c.Bias, std)
	}
	for _, p := range m.Params() {
		p.Tensor.SetName(p.Name)
	}
	if err := nn.SetQuant(m.BlockLinears(), c.Quant); err != nil {
		return nil, err
	}
	return m, nil
}

// Linears implements nn.LinearLister: every block's linear layers
// ("blocks.{i}.attn.wqkv", …), then the untied head ("head") if any. The
// tied head is the embedding table and is not listed.
func (m *Model) Linears() []nn.NamedLinear {
	ls := m.BlockLinears()
	if m.Head != nil {
		ls = append(ls, nn.NamedLinear{Name: "head", Layer: m.Head})
	}
	return ls
}

// BlockLinears lists the blocks' linear layers: the ones Config.Quant
// fake-quantises.
func (m *Model) BlockLinears() []nn.NamedLinear {
	var ls []nn.NamedLinear
	for i, b := range m.Blocks {
		ls = append(ls, nn.PrefixLinears(fmt.Sprintf("blocks.%d", i), b.Linears())...)
	}
	return ls
}

// Params implements nn.Module.
func (m *Model) Params() []nn.Param {
	ps := nn.Prefix("wte", m.Wte.Params())
	if m.Wpe != nil {
		ps = append(ps, nn.Prefix("wpe", m.Wpe.Params())...)
	}
	ps = append(ps, nn.Prefix("blocks", m.Blocks.Params())...)
	ps = append(ps, nn.Prefix("norm_f", m.NormF.Params())...)
	if m.Head != nil {
		ps = append(ps, nn.Prefix("head", m.Head.Params())...)
	}
	return ps
}

// SetTraining turns dropout on (true) or off. Models start in training
// mode; generation and evaluation switch it off for their duration.
func (m *Model) SetTraining(on bool) {
	m.training = on
	for _, b := range m.Blocks {
		b.Training = on
	}
}

// Training reports whether dropout is on.
func (m *Model) Training() bool { return m.training }

// DropoutGenerator is the generator that draws dropout masks (part of a
// run's RNG state).
func (m *Model) DropoutGenerator() *forge.Generator { return m.gen }

// Cache is a KV cache for every layer.
type Cache struct {
	Layers []*nn.KVCache
}

// Len is the number of cached positions.
func (c *Cache) Len() int { return c.Layers[0].Len }

// NewCache returns an empty cache for batch b up to the model's context.
func (m *Model) NewCache(b int) *Cache {
	c := &Cache{}
	for _, blk := range m.Blocks {
		c.Layers = append(c.Layers, blk.Attn.NewCache(b, m.Config.Context, m.activations()))
	}
	return c
}

// Forward returns the logits (B, T, Vp) for int32 ids (B, T). With a cache,
// ids are the positions after the cached ones and extend the cache.
func (m *Model) Forward(ids *forge.Tensor, cache *Cache) *forge.Tensor {
	if ids.Dim() != 2 || ids.DType() != forge.Int32 {
		panic(&forge.Error{Op: "gpt.forward", Msg: fmt.Sprintf("ids must be int32 (B, T), got %v %v", ids.DType(), ids.Shape())})
	}
	T := ids.Size(1)
	pos0 := 0
	if cache != nil {
		pos0 = cache.Len()
	}
	if pos0+T > m.Config.Context {
		panic(&forge.Error{Op: "gpt.forward", Msg: fmt.Sprintf("%d positions (%d cached + %d new) exceed the context %d", pos0+T, pos0, T, m.Config.Context)})
	}
	x := m.Wte.Forward(ids) // (B, T, C)
	if m.Wpe != nil {
		x = x.Add(m.Wpe.Weight.Narrow(0, pos0, T)) // (T, C) broadcast over B
	}
	for i, b := range m.Blocks {
		var kv *nn.KVCache
		if cache != nil {
			kv = cache.Layers[i]
		}
		// Profiles attribute the block's forward kernels to "blocks.i".
		forge.ScopeIndexed("blocks", i, func() {
			if kv == nil && m.Config.Checkpoint.Has(i) {
				// Only x is kept; the backward runs the block again.
				x = forge.Checkpoint(func(x *forge.Tensor) *forge.Tensor { return b.Forward(x, nil) }, x)
				return
			}
			x = b.Forward(x, kv)
		})
	}
	x = m.NormF.Forward(x)
	if m.Head != nil {
		return m.Head.Forward(x)
	}
	// The tied head: a Linear over the embedding, in the compute dtype
	// when mixed precision is on (logits in it too). (B, T, Vp)
	head := nn.Linear{Weight: m.Wte.Weight, Compute: m.compute}
	return head.Forward(x)
}

// SetCompute turns mixed precision on or off. With dt Float16 or BFloat16
// the parameters stay float32 (the optimizer's master weights) and so does
// the residual stream, while everything between a norm and the residual
// add runs on 16-bit activations: each norm writes dt (from float32
// arithmetic), every matmul (the linear layers and the head) casts its
// weight to dt and multiplies with float32 accumulation, and RoPE,
// attention, SwiGLU/GELU and the logits stay in dt (statistics — norms'
// rstd, attention's log-sum-exp, the loss — in float32). A branch's output
// is cast to float32 where it joins the residual stream. Gradients flow
// back through the same dtypes into float32 parameter gradients.
// dt Float32 is the plain float32 model.
//
// It returns an error, and changes nothing, when dt is not one of these
// or when the model's device cannot compute in dt (the CPU stores 16-bit
// floats but computes only in float32 and float64).
func (m *Model) SetCompute(dt forge.DType) error {
	switch dt {
	case forge.Float32:
	case forge.Float16, forge.BFloat16:
		if err := checkCompute(m.Wte.Weight.Device(), dt); err != nil {
			return err
		}
	default:
		return fmt.Errorf("gpt: compute dtype %v: want float32, bfloat16 or float16", dt)
	}
	m.compute = dt
	var ls []*nn.Linear
	norms := []*nn.Norm{m.NormF}
	for _, b := range m.Blocks {
		ls = append(ls, b.Attn.WQKV, b.Attn.WO)
		switch {
		case b.MoE != nil:
			ls = append(ls, b.MoE.Linears()...) // the router stays float32
		case b.MLP.Gate != nil:
			ls = append(ls, b.MLP.Gate, b.MLP.Up, b.MLP.Down)
		default:
			ls = append(ls, b.MLP.Up, b.MLP.Down)
		}
		norms = append(norms, b.Norm1, b.Norm2)
	}
	if m.Head != nil {
		ls = append(ls, m.Head)
	}
	for _, l := range ls {
		l.Compute = dt
	}
	for _, n := range norms {
		n.Compute = dt
	}
	return nil
}

// activations is the dtype of the activations inside the blocks: the
// compute dtype under mixed precision, else the weights'.
func (m *Model) activations() forge.DType {
	if m.compute.IsHalf() {
		return m.compute
	}
	return m.Wte.Weight.DType()
}

// Compute returns the dtype of the model's activations and matmuls set by
// SetCompute (Float32 unless mixed precision is on).
func (m *Model) Compute() forge.DType { return m.compute }

// checkCompute reports a device that cannot compute the model in dt here,
// from its capability table, rather than by a kernel deep inside the
// first step.
func checkCompute(dev *forge.Device, dt forge.DType) error {
	if err := dev.CanCompute(dt); err != nil {
		return fmt.Errorf("gpt: %w; train in float32 there, or use a device with 16-bit compute (Metal)", err)
	}
	return nil
}

// Loss returns the mean cross-entropy of predicting targets (B, T) from
// ids (B, T); targets equal to -1 are ignored. With a mixture of experts,
// while gradients are recorded it is the objective the optimizer sees,
//
//	loss = cross-entropy + moe_aux_coef · Σ_blocks aux_i
//
// (aux_i the block's load-balancing loss, nn.MoE); under forge.NoGrad
// (validation, `forge eval`) the cross-entropy alone, comparable with a
// plain model's.
func (m *Model) Loss(ids, targets *forge.Tensor) *forge.Tensor {
	l := forge.CrossEntropy(m.Forward(ids, nil), targets, -1)
	if !m.Config.MoE() {
		return l
	}
	var aux *forge.Tensor
	for _, b := range m.Blocks {
		if a := b.MoE.TakeAux(); a != nil {
			if aux == nil {
				aux = a
			} else {
				aux = aux.Add(a)
			}
		}
	}
	if !forge.GradEnabled() || aux == nil {
		return l
	}
	return l.Add(aux.MulScalar(m.Config.MoEAuxCoef).Cast(l.DType()))
}

// RouterStats is the routing of the last forward, one entry per block
// (nil without a mixture of experts).
func (m *Model) RouterStats() []nn.RouterStats {
	if !m.Config.MoE() {
		return nil
	}
	out := make([]nn.RouterStats, len(m.Blocks))
	for i, b := range m.Blocks {
		out[i] = b.MoE.Stats()
	}
	return out
}
