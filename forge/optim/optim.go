// Package optim holds Forge's optimizers (AdamW and Muon), gradient
// clipping and learning-rate schedules. It is written against the public forge API only, so it runs on
// every backend.
//
// A training step, llm.c style:
//
//	opt := optim.NewAdamW(params, optim.DefaultAdamWConfig())
//	sched := optim.WarmupCosine{LR: 6e-4, MinLR: 6e-5, Warmup: 100, Total: 5000}
//	for step := 0; step < 5000; step++ {
//		opt.ZeroGrad()
//		loss := model(batch)
//		loss.Backward()
//		norm := optim.ClipGradNorm(params, 1.0)
//		opt.SetLR(sched.At(step))
//		opt.Step()
//	}
//
// On a device that queues kernels (Metal), reading the norm back before the
// update costs a wait in the middle of the step. The deferred form computes
// the norm and the clip coefficient on the device and folds the
// coefficient into the AdamW kernels, so the step is queued whole and read
// once (forge/train's Trainer does this):
//
//	clip := optim.ClipGradNormDeferred(params, 1.0)
//	opt.StepClipped(clip)      // skipped on the device if the norm is not finite
//	l, norm := loss.Item(), clip.Norm() // the one wait
//
// Optimizer updates run under forge.NoGrad and are attributed to
// forge.PhaseOptimizer; they write into the parameter tensors in place
// (CopyFrom), so a parameter keeps its identity — modules, views and
// checkpoints holding it see the new values.
//
// # Muon
//
// Muon (NewMuon, `"optimizer": "muon"` in a training config) updates the
// hidden 2-D weights — parameters named blocks.* with two dimensions
// (HiddenMatrix): the attention and MLP projections — with momentum
// orthogonalised by a Newton–Schulz iteration, and everything else (the
// embedding, an untied head, norm gains, biases) with AdamW. The variant,
// exactly, for a matrix P (rows, cols) = (out, in) with gradient G:
//
//	M = μ·M + G,  U = G + μ·M          Nesterov momentum, μ = 0.95
//	X = U/(‖U‖_F + 1e-7), Xᵀ if rows > cols
//	5 × { A = X·Xᵀ;  X = 3.4445·X + (−4.7750·A + 2.0315·A·A)·X }
//	P = P·(1 − lr·wd) − lr·√max(1, rows/cols)·X  (X transposed back)
//
// with its own learning rate (0.02 by default; it follows the schedule in
// proportion to AdamW's) and decoupled weight decay (0 by default). The
// scale √max(1, rows/cols) is the original Muon's, not one matched to
// AdamW's update RMS, which is why the learning rates differ. The
// iteration's matmuls run on the parameter's device through forge ops, in
// the parameter's dtype; a deferred clip's coefficient and skip flag are
// read there too (forge.GradClip.Factors), so StepClipped queues the whole
// update with no read-back, as AdamW's does. Muon's state is one momentum
// per matrix (AdamW keeps two moments), and Describe lists which
// parameters get which update.
package optim

import (
	"fmt"
	"strings"

	"github.com/forgeml/forge/forge"
)

// Optimizer is what a training loop needs of an optimizer: *AdamW and
// *Muon are ones. Checkpointing is each optimizer's own (State,
// LoadState).
type Optimizer interface {
	Params() []*forge.Tensor // every optimized parameter
	LR() float64             // the learning rate SetLR last set
	SetLR(lr float64)        // the learning rate of the next step (a schedule's value)
	StepCount() int          // steps taken (a skipped step does not count)
	ZeroGrad()
	Step()                         // one update from the gradients
	StepClipped(c *forge.GradClip) // one update from the gradients scaled by a deferred clip
	Describe() []GroupInfo         // the parameter groups, for display
}

// GroupInfo describes one parameter group of an optimizer for display
// (the REPL's :info, run summaries): the update it gets, its current
// learning rate and weight decay, and its parameters' names.
type GroupInfo struct {
	Optimizer   string // "adamw" or "muon"
	LR          float64
	WeightDecay float64
	Params      []string
	Elements    int // the parameters' total element count
}

// String is the group in one line: the update, lr, weight decay, the
// count and the parameter names with layer indices folded
// ("blocks.*.attn.wo.weight").
func (g GroupInfo) String() string {
	return fmt.Sprintf("%-5s lr %.2e  wd %-5g %d tensors, %s values: %s", g.Optimizer, g.LR, g.WeightDecay,
		len(g.Params), thousands(g.Elements), strings.Join(FoldNames(g.Params), ", "))
}

// thousands writes n with commas: 36,864.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// FoldNames replaces each all-digit component of the dotted names by "*"
// and drops repeats, keeping the first occurrence's order:
// blocks.0.attn.wo.weight and blocks.1.attn.wo.weight are one
// blocks.*.attn.wo.weight.
func FoldNames(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		parts := strings.Split(n, ".")
		for i, p := range parts {
			if p != "" && strings.Trim(p, "0123456789") == "" {
				parts[i] = "*"
			}
		}
		f := strings.Join(parts, ".")
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// names returns the parameters' names.
func names(ps []*forge.Tensor) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name()
	}
	return out
}

// numel is the parameters' total element count.
func numel(ps []*forge.Tensor) int {
	n := 0
	for _, p := range ps {
		n += p.Numel()
	}
	return n
}

// Schedule maps a 0-based optimizer step to a learning rate.
type Schedule interface {
	At(step int) float64
}

// ParamGroup is a set of parameters sharing a weight decay.
type ParamGroup struct {
	Params      []*forge.Tensor
	WeightDecay float64
}

// DecayGroups splits params into the two groups of GPT-style training:
// tensors with Dim() ≥ 2 (weights, embeddings) decay with weightDecay, the
// others (biases, norm gains) do not decay. Either group may be empty; the
// order of params within a group is kept.
func DecayGroups(params []*forge.Tensor, weightDecay float64) []ParamGroup {
	decay := ParamGroup{WeightDecay: weightDecay}
	noDecay := ParamGroup{}
	for _, p := range params {
		if p.Dim() >= 2 {
			decay.Params = append(decay.Params, p)
		} else {
			noDecay.Params = append(noDecay.Params, p)
		}
	}
	return []ParamGroup{decay, noDecay}
}

// errorf returns the panic value for a misuse of the optimizers, in forge's
// style so forge.Try reports it.
func errorf(op, format string, args ...any) *forge.Error {
	return &forge.Error{Op: op, Msg: fmt.Sprintf(format, args...)}
}

var (
	_ Optimizer = (*AdamW)(nil)
	_ Optimizer = (*Muon)(nil)
)
