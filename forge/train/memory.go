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
// logits. Temporaries come on top, so a run needs more than this; a
// config that needs more than this cannot run at all.
type Memory struct {
	Weights, Gradients, Optimizer, Activations float64
}

// Total is the sum of the parts.
func (m Memory) Total() float64 { return m.Weights + m.Gradients + m.Optimizer + m.Activations }

func (m Memory) String() string {
	return fmt.Sprintf("%s (weights %s, gradients %s, optimizer state %s, activations %s)",
		numfmt.Bytes(m.Total()), numfmt.Bytes(m.Weights), numfmt.Bytes(m.Gradients),
		numfmt.Bytes(m.Optimizer), numfmt.Bytes(m.Activations))
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
	perToken := float64(r.Layers)*(10*float64(r.Dim)+3*float64(r.FFNHidden))*act + 4*float64(r.PaddedVocab())
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
	return Memory{Weights: 4 * params, Gradients: 4 * params, Optimizer: opt, Activations: tokens * perToken}
}

// paramsFloat is gpt.Config.Params in float64, from its dominant terms
// when the int count could overflow.
func paramsFloat(c Config) float64 {
	r := c.Model.Resolved()
	C, L, F, V := float64(r.Dim), float64(r.Layers), float64(r.FFNHidden), float64(r.PaddedVocab())
	approx := V*C + L*(4*C*C+3*C*F)
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
