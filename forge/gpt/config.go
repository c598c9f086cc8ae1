// Package gpt is a decoder-only transformer language model built from
// package nn: token embedding (tied with the output head by default),
// pre-norm blocks of causal self-attention and an MLP (or a mixture of
// expert MLPs, n_experts), a final norm, and a head over a vocabulary
// padded to a multiple of 64. It also generates
// text: temperature, top-k, top-p, a KV cache, a stop condition and a
// callback that streams tokens.
//
// A Config describes the architecture and is read from JSON; the files in
// configs/ override the fields of DefaultConfig. Initialisation follows
// llm.c and nanoGPT: every matrix N(0, 0.02²), the residual projections
// (attention output, MLP down) N(0, (0.02/√(2L))²), norm weights 1, biases
// 0. Weights depend only on the seed, on every backend.
//
// Invalid configs are reported as errors by Config.Validate and New; a
// model misused at run time (a context longer than Config.Context, a token
// id out of range) panics with a *forge.Error like the rest of forge.
package gpt

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/forgeml/forge/forge"
)

// Config is a GPT architecture. The JSON names are the ones in configs/.
type Config struct {
	Vocab     int     `json:"vocab"`      // 4096: tokens the tokenizer makes (the model pads to PaddedVocab)
	Context   int     `json:"context"`    // 256: longest sequence
	Dim       int     `json:"d_model"`    // 256: channels C
	Layers    int     `json:"n_layer"`    // 6
	Heads     int     `json:"n_head"`     // 8 query heads
	KVHeads   int     `json:"n_kv_head"`  // 0 = n_head; fewer is grouped-query attention
	FFNHidden int     `json:"ffn_hidden"` // 0 = SwiGLU round_up(8/3·C, 64), GELU 4·C
	Norm      string  `json:"norm"`       // "rmsnorm" | "layernorm"
	MLP       string  `json:"mlp"`        // "swiglu" | "gelu"
	Position  string  `json:"position"`   // "rope" | "learned"
	RoPETheta float64 `json:"rope_theta"` // 10000
	NormEps   float64 `json:"norm_eps"`   // 1e-5
	Bias      bool    `json:"bias"`       // biases in linear layers (and LayerNorm)
	Untied    bool    `json:"untied"`     // a separate output head instead of the tied embedding
	Dropout   float64 `json:"dropout"`    // residual dropout while training
	InitStd   float64 `json:"init_std"`   // 0.02

	// Checkpoint is the blocks whose activations are recomputed during
	// the backward instead of kept (forge.Checkpoint): false (none), true
	// (every block) or a list of block indices [0, 2, 5]. The gradients
	// are the same; the memory of a block's activations is traded for
	// running its forward twice.
	Checkpoint Blocks `json:"checkpoint_activations,omitzero"`
	// Mixture of experts (nn.MoE): with Experts > 1 every block's MLP is E
	// expert MLPs of the kind above (each of FFNHidden) behind a softmax
	// router that sends each token to TopK of them.
	Experts    int     `json:"n_experts,omitempty"`    // 0 or 1 = the plain MLP; 8
	TopK       int     `json:"moe_top_k,omitempty"`    // 0 = 2 (when n_experts > 1); experts per token
	MoEAuxCoef float64 `json:"moe_aux_coef,omitempty"` // 0 = 0.01; weight of the load-balancing loss in the training loss
	// Quant fake-quantises the weights of the blocks' linear layers
	// (attention wqkv and wo, MLP gate, up and down) in every forward —
	// "none" (or empty), "int8" or "ternary"; see forge.FakeQuant. The
	// embedding, the tied head and an untied head stay float32 (the
	// common choice: BitNet keeps them in high precision).
	Quant string `json:"quant"`
}

// DefaultConfig is the `small` model: V4096 d256 L6 H8 T256, SwiGLU 1024,
// RMSNorm, RoPE, tied embeddings, no biases, no dropout.
func DefaultConfig() Config {
	return Config{
		Vocab: 4096, Context: 256, Dim: 256, Layers: 6, Heads: 8,
		Norm: "rmsnorm", MLP: "swiglu", Position: "rope",
		RoPETheta: 10000, NormEps: 1e-5, InitStd: 0.02,
	}
}

// ParseConfig reads a JSON config over DefaultConfig, refusing unknown
// fields (a typo would otherwise silently keep a default).
func ParseConfig(data []byte) (Config, error) {
	c := DefaultConfig()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("gpt: config: %v", err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("gpt: config: trailing data after the JSON object")
	}
	return c, c.Validate()
}

// Resolved returns c with defaults filled in: KV heads, FFN size.
func (c Config) Resolved() Config {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.FFNHidden == 0 {
		if c.MLP == "gelu" {
			c.FFNHidden = 4 * c.Dim
		} else {
			c.FFNHidden = roundUp(8*c.Dim/3, 64)
		}
	}
	if c.RoPETheta == 0 {
		c.RoPETheta = 10000
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
	if c.Experts > 1 {
		if c.TopK == 0 {
			c.TopK = 2
		}
		if c.MoEAuxCoef == 0 {
			c.MoEAuxCoef = 0.01
		}
	}
	return c
}

// PaddedVocab is the vocabulary rounded up to a multiple of 64: the rows
// of the embedding and the head. Ids at or above Vocab are never produced
// by the tokenizer, and generation never samples them.
func (c Config) PaddedVocab() int { return roundUp(c.Vocab, 64) }

// MoE reports whether the blocks hold mixtures of experts (n_experts > 1).
func (c Config) MoE() bool { return c.Experts > 1 }

// HeadDim is the dimension of one attention head.
func (c Config) HeadDim() int { return c.Dim / c.Heads }

// Validate reports the first problem with c, saying what to change.
func (c Config) Validate() error {
	r := c.Resolved()
	bad := func(format string, a ...any) error { return fmt.Errorf("gpt: config: "+format, a...) }
	switch {
	case c.Vocab < 2 || c.Vocab > 65536:
		return bad("vocab %d: want 2..65536 (token files store uint16 ids)", c.Vocab)
	case c.Context < 1:
		return bad("context %d: want at least 1", c.Context)
	case c.Dim < 1 || c.Layers < 1 || c.Heads < 1:
		return bad("d_model %d, n_layer %d, n_head %d: all must be positive", c.Dim, c.Layers, c.Heads)
	case c.Dim%c.Heads != 0:
		return bad("d_model %d is not a multiple of n_head %d", c.Dim, c.Heads)
	case c.KVHeads < 0 || r.Heads%r.KVHeads != 0:
		return bad("n_kv_head %d must divide n_head %d", c.KVHeads, c.Heads)
	case c.HeadDim()%2 != 0 && r.Position == "rope":
		return bad("head dimension %d must be even for RoPE", c.HeadDim())
	case c.Norm != "rmsnorm" && c.Norm != "layernorm":
		return bad("norm %q: want \"rmsnorm\" or \"layernorm\"", c.Norm)
	case c.MLP != "swiglu" && c.MLP != "gelu":
		return bad("mlp %q: want \"swiglu\" or \"gelu\"", c.MLP)
	case c.Position != "rope" && c.Position != "learned":
		return bad("position %q: want \"rope\" or \"learned\"", c.Position)
	case c.FFNHidden < 0:
		return bad("ffn_hidden %d: want positive (or 0 for the default)", c.FFNHidden)
	case c.Dropout < 0 || c.Dropout >= 1:
		return bad("dropout %g: want 0 <= p < 1", c.Dropout)
	case !forge.ValidQuant(c.Quant):
		return bad("quant %q: want \"none\", \"int8\" or \"ternary\"", c.Quant)
	case c.NormEps < 0 || c.InitStd < 0 || c.RoPETheta < 0:
		return bad("norm_eps, init_std and rope_theta must not be negative")
	case c.Experts < 0:
		return bad("n_experts %d: want 0 or 1 (the plain MLP) or more (a mixture of experts)", c.Experts)
	case c.TopK < 0 || r.MoE() && r.TopK > r.Experts:
		return bad("moe_top_k %d: want 1..n_experts (%d), or 0 for 2", c.TopK, c.Experts)
	case !r.MoE() && (c.TopK > 1 || c.MoEAuxCoef != 0):
		return bad("moe_top_k %d and moe_aux_coef %g need n_experts > 1 (it is %d)", c.TopK, c.MoEAuxCoef, c.Experts)
	case c.MoEAuxCoef < 0 || math.IsNaN(c.MoEAuxCoef) || math.IsInf(c.MoEAuxCoef, 0):
		return bad("moe_aux_coef %g: want a finite value >= 0 (0 = 0.01)", c.MoEAuxCoef)
	}
	if r.MoE() && !c.Checkpoint.IsZero() {
		// The load-balancing loss is a second output of a MoE block, which
		// forge.Checkpoint (one output) would cut off from the gradient.
		return bad("checkpoint_activations with n_experts %d: checkpointing mixture-of-experts blocks is not supported yet; turn one of them off", c.Experts)
	}
	for _, i := range c.Checkpoint.Indices() {
		if i >= c.Layers {
			return bad("checkpoint_activations: block %d is out of range: the model has %d blocks (0..%d)", i, c.Layers, c.Layers-1)
		}
	}
	return nil
}

// Params returns the number of parameters of the model c describes (tied
// embedding counted once), without building it: with a mixture of experts,
// all n_experts MLPs and the routers (ActiveParams counts what one token
// uses).
func (c Config) Params() int {
	r := c.Resolved()
	C, V, L := r.Dim, r.PaddedVocab(), r.Layers
	D := r.HeadDim()
	qkv := C * (r.Heads + 2*r.KVHeads) * D
	wo := r.Heads * D * C
	norm := C
	if r.Norm == "layernorm" && r.Bias {
		norm = 2 * C
	}
	E := 1
	if r.MoE() {
		E = r.Experts
	}
	block := qkv + wo + E*r.mlpParams() + 2*norm
	if r.MoE() {
		block += r.Experts * C // the router (E, C), no bias
	}
	if r.Bias {
		block += (r.Heads+2*r.KVHeads)*D + C
	}
	n := V*C + L*block + norm
	if r.Position == "learned" {
		n += r.Context * C
	}
	if r.Untied {
		n += V * C
		if r.Bias {
			n += V
		}
	}
	return n
}

// FLOPsPerToken is the training cost of one token (forward + backward =
// 3× forward) counting matmuls: 6 × matmul weights (head included) plus
// 12·L·T·C for the attention scores and weighted sums over a full
// context, the convention of PaLM and the PyTorch baseline script. With
// a mixture of experts the weights a token multiplies are the router's
// E·C and k experts' MLPs: the cost grows with moe_top_k, not with
// n_experts (but for the router).
func (c Config) FLOPsPerToken() int64 {
	r := c.Resolved()
	C, L, F, D := int64(r.Dim), int64(r.Layers), int64(r.FFNHidden), int64(r.HeadDim())
	mlp := 2 * C * F
	if r.MLP == "swiglu" {
		mlp += C * F
	}
	mm := C*int64(r.Heads+2*r.KVHeads)*D + int64(r.Heads)*D*C + mlp
	if r.MoE() {
		mm += int64(r.TopK-1)*mlp + int64(r.Experts)*C
	}
	w := L*mm + int64(r.PaddedVocab())*C
	return 6*w + 12*L*int64(r.Context)*C
}

// ActiveParams is the number of parameters one token's forward uses:
// Params less the n_experts − moe_top_k expert MLPs it is not routed to
// (Params itself without a mixture of experts).
func (c Config) ActiveParams() int {
	r := c.Resolved()
	if !r.MoE() {
		return c.Params()
	}
	return c.Params() - r.Layers*(r.Experts-r.TopK)*r.mlpParams()
}

// mlpParams is the size of one (expert) MLP of a resolved config, biases
// included.
func (r Config) mlpParams() int {
	C, F := r.Dim, r.FFNHidden
	n := 2 * C * F
	if r.MLP == "swiglu" {
		n += C * F
	}
	if r.Bias {
		n += C + F
		if r.MLP == "swiglu" {
			n += F
		}
	}
	return n
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }
