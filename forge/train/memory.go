package train

import (
	"fmt"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/internal/numfmt"
)

// Memory is a lower bound on what training a config holds at once, in
// bytes: float32 weights, their gradients and AdamW's two moments (16
// bytes a parameter; with Muon, the blocks' matrices keep one momentum
// instead: 12 bytes for those), and the activations the backward keeps for one
// micro-batch — per token and layer about 10·d_model + 3·ffn_hidden
// values (norm outputs, q/k/v, attention output, projections, residuals,
// the MLP's gate, up and product; attention keeps no T×T matrix), plus the
// logits. With a mixture of experts the weights count every expert, and a
// token keeps k copies of the MLP's values plus, per copy, its gathered
// input, the expert's output and the gated output (3·d_model), and the
// router's logits and probabilities (2·n_experts). Under quant (int8,
// ternary) the fake-quantised block weights the matmuls keep for the
// backward count too (4 bytes a block weight). Temporaries come on top,
// so a run needs more than this; a config that needs more than this
// cannot run at all.
//
// A block whose activations are checkpointed (gpt.Config.Checkpoint)
// keeps only its float32 input, d_model values a token; the backward then
// holds one block's activations at a time while it computes them again,
// counted once.
type Memory struct {
	Weights, Gradients, Optimizer, Activations float64

	// Checkpointed is the number of blocks recomputed in the backward,
	// of Layers.
	Checkpointed, Layers int
}

// Total is the sum of the parts.
func (m Memory) Total() float64 { return m.Weights + m.Gradients + m.Optimizer + m.Activations }

func (m Memory) String() string {
	ck := ""
	if m.Checkpointed > 0 {
		ck = fmt.Sprintf(", %d of %d blocks checkpointed", m.Checkpointed, m.Layers)
	}
	return fmt.Sprintf("%s (weights %s, gradients %s, optimizer state %s, activations %s%s)",
		numfmt.Bytes(m.Total()), numfmt.Bytes(m.Weights), numfmt.Bytes(m.Gradients),
		numfmt.Bytes(m.Optimizer), numfmt.Bytes(m.Activations), ck)
}

// MemoryNeeded estimates c's training memory (Memory), in float64 so that
// absurd configs do not overflow.
func (c Config) MemoryNeeded() Memory {
	r := c.Model.Resolved()
	params := float64(paramsFloat(c))
	act := 4.0
	if c.Precision == "bfloat16" || c.Precision == "float16" {
		act = 2
	}
	tokens := float64(c.Batch) * float64(r.Context)
	C, F := float64(r.Dim), float64(r.FFNHidden)
	perLayer := 10*C + 3*F
	if r.MoE() {
		perLayer = 10*C + float64(r.TopK)*(3*F+3*C) + 2*float64(r.Experts)
	}
	block := perLayer * act // one block's activations, a token
	k := r.Checkpoint.Count(r.Layers)
	perToken := float64(r.Layers-k)*block + 4*float64(r.PaddedVocab())
	if k > 0 {
		perToken += float64(k)*4*C + block
	}
	acts := tokens * perToken
	if r.Quant == forge.QuantInt8 || r.Quant == forge.QuantTernary {
		D := float64(r.HeadDim())
		mlp := 2 * C * F
		if r.MLP == "swiglu" {
			mlp = 3 * C * F
		}
		if r.MoE() {
			mlp *= float64(r.Experts)
		}
		acts += 4 * float64(r.Layers) * (C*float64(r.Heads+2*r.KVHeads)*D + float64(r.Heads)*D*C + mlp)
	}
	opt := 8 * params
	if c.OptimizerName() == "muon" {
		// The AdamW group: embeddings and head (and norms, counted
		// with the matrices: the estimate stays a lower bound).
		adam := float64(r.PaddedVocab()) * float64(r.Dim)
		if r.Untied {
			adam *= 2
		}
		if r.Position == "learned" {
			adam += float64(r.Context) * float64(r.Dim)
		}
		opt = 8*adam + 4*max(params-adam, 0)
	}
	return Memory{Weights: 4 * params, Gradients: 4 * params, Optimizer: opt, Activations: acts,
		Checkpointed: k, Layers: r.Layers}
}

// paramsFloat is gpt.Config.Params in float64, from its dominant terms
// when the int count could overflow.
func paramsFloat(c Config) float64 {
	r := c.Model.Resolved()
	C, L, F, V := float64(r.Dim), float64(r.Layers), float64(r.FFNHidden), float64(r.PaddedVocab())
	E := 1.0
	if r.MoE() {
		E = float64(r.Experts)
	}
	approx := V*C + L*(4*C*C+3*C*F*E)
	if r.Untied {
		approx += V * C
	}
	if approx < 1e15 {
		return float64(r.Params())
	}
	return approx
}

// CheckMemory refuses, in one line, a config whose training memory
// (MemoryNeeded) exceeds the memory available now (MemAvailable on Linux;
// elsewhere nothing is checked) or the default device's memory budget
// (Metal: the GPU's recommended working set), naming both and what to
// shrink.
func (c Config) CheckMemory() error {
	need := c.MemoryNeeded()
	avail, ok := availableMemory()
	of := "of memory is available"
	dev := forge.DefaultDevice()
	if budget := dev.Memory().Budget; budget > 0 && (!ok || budget < avail) {
		avail, ok = budget, true
		of = "is the " + dev.Name() + " device's memory budget (the GPU's recommended working set)"
	}
	if !ok || need.Total() <= float64(avail) {
		return nil
	}
	what := "d_model, n_layer or ffn_hidden (the weights alone do not fit)"
	if need.Weights+need.Gradients+need.Optimizer <= float64(avail) {
		what = "batch or context (the activations), or the model"
	}
	return fmt.Errorf("train: config %s needs at least %s to train, but %s %s; shrink %s",
		c.Name, need, numfmt.Bytes(float64(avail)), of, what)
}

// CheckWeightMemory is CheckMemory for loading the weights alone (eval,
// generate, export).
func (c Config) CheckWeightMemory() error {
	need := c.MemoryNeeded().Weights
	avail, ok := availableMemory()
	if !ok || need <= float64(avail) {
		return nil
	}
	return fmt.Errorf("train: config %s has weights of %s, but %s of memory is available", c.Name, numfmt.Bytes(need), numfmt.Bytes(float64(avail)))
}

// AvailableMemory is the memory the system can give now without
// swapping, in bytes (ok false where it is not known): forge.AvailableMemory.
func AvailableMemory() (bytes int64, ok bool) { return forge.AvailableMemory() }

func availableMemory() (int64, bool) { return forge.AvailableMemory() }
