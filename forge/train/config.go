package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/forgeml/forge/configs"
	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/optim"
)

// Config is a training run: the model and everything about how it trains.
// Files in configs/ override the fields of DefaultConfig.
type Config struct {
	Name    string     `json:"name"`    // "small"
	Comment string     `json:"comment"` // free text
	Model   gpt.Config `json:"model"`

	Batch       int     `json:"batch"`        // 8 sequences per micro-batch
	GradAccum   int     `json:"grad_accum"`   // 1 micro-batch per step
	Steps       int     `json:"steps"`        // 5000: length of the schedule
	LR          float64 `json:"lr"`           // 1e-3 peak learning rate
	MinLR       float64 `json:"min_lr"`       // 0 = lr/10
	Warmup      int     `json:"warmup"`       // 100 steps of linear warmup
	Schedule    string  `json:"schedule"`     // "cosine" | "wsd" | "constant"
	Cooldown    float64 `json:"cooldown"`     // WSD: fraction of steps spent decaying (0.2)
	WeightDecay float64 `json:"weight_decay"` // 0.1, on rank ≥ 2 parameters only
	Beta1       float64 `json:"beta1"`        // 0.9
	Beta2       float64 `json:"beta2"`        // 0.95
	Eps         float64 `json:"eps"`          // 1e-8
	GradClip    float64 `json:"grad_clip"`    // 1.0 global norm (0 = off)
	Seed        uint64  `json:"seed"`         // weights, batches and dropout
	EvalEvery   int     `json:"eval_every"`   // 100 steps between validation losses (0 = never)
	EvalBatches int     `json:"eval_batches"` // 20 batches per validation loss
	SaveEvery   int     `json:"save_every"`   // 500 steps between checkpoints of a run directory (0 = only at the end)
	Tokenizer   string  `json:"tokenizer"`    // "bpe" | "char"
	ValFraction float64 `json:"val_fraction"` // 0.1 of the tokens held out

	// Optimizer is "adamw" (the default; "" means it too) or "muon"
	// (optim.Muon): the blocks' 2-D weights get momentum orthogonalised
	// by Newton–Schulz, the embedding, head, norms and biases AdamW with
	// lr, beta1, beta2, eps and weight_decay above. The Muon group's
	// learning rate follows the schedule in proportion: muon_lr at the
	// peak, muon_lr·(schedule/lr) elsewhere.
	Optimizer       string  `json:"optimizer,omitempty"`
	MuonLR          float64 `json:"muon_lr,omitempty"`           // 0 = 0.02: the Muon group's peak learning rate
	MuonMomentum    float64 `json:"muon_momentum,omitempty"`     // 0 = 0.95 (Nesterov)
	MuonNSSteps     int     `json:"muon_ns_steps,omitempty"`     // 0 = 5 Newton–Schulz iterations
	MuonWeightDecay float64 `json:"muon_weight_decay,omitempty"` // 0: decoupled decay of the Muon group, p·(1 − muon_lr·wd)

	// Mixed precision (see gpt.Model.SetCompute): "float32" (the default;
	// "" means it too), "bfloat16" or "float16" for the activations and
	// matmuls, with float32 master weights and residual stream. float16
	// scales the loss dynamically.
	Precision string `json:"precision,omitempty"`
	// LossScale is float16's initial loss scale, a power of two (0 =
	// 65536); LossScaleWindow the good steps after which it doubles (0 =
	// 2000). A step with a non-finite gradient is skipped and halves it.
	LossScale       float64 `json:"loss_scale,omitempty"`
	LossScaleWindow int     `json:"loss_scale_window,omitempty"`

	// MaxNonFinite is how many steps in a row may have a non-finite loss
	// or gradient norm before training stops with an error (0 =
	// DefaultMaxNonFinite). Such a step makes no update. With float16 a
	// non-finite gradient is the loss scaler's business (it halves the
	// scale and retries) and only a non-finite loss counts.
	MaxNonFinite int `json:"max_nonfinite,omitempty"`

	// Tripwire checks every kernel's output for NaN and ±Inf while
	// training (forge.SetTripwire): the first op that makes one stops the
	// run with an error naming it, its shapes, its scope, the parameter
	// and the step, and that step is not applied. It slows training (see
	// the README); with float16, whose loss scaler expects overflows, it
	// stops at the first one.
	Tripwire bool `json:"tripwire,omitempty"`
}

// DefaultMaxNonFinite is MaxNonFinite's default.
const DefaultMaxNonFinite = 3

// Defaults of float16's dynamic loss scaling.
const (
	DefaultLossScale       = 65536
	DefaultLossScaleWindow = 2000
)

// ComputeDType is the dtype of the model's matmuls: forge.Float32 (the
// plain model), forge.BFloat16 or forge.Float16. Validate first.
func (c Config) ComputeDType() forge.DType {
	switch c.Precision {
	case "bfloat16":
		return forge.BFloat16
	case "float16":
		return forge.Float16
	}
	return forge.Float32
}

// lossScaling reports whether c scales the loss (float16) and with what
// initial scale and window.
func (c Config) lossScaling() (on bool, scale float64, window int) {
	if c.Precision != "float16" {
		return false, 1, 0
	}
	scale, window = c.LossScale, c.LossScaleWindow
	if scale == 0 {
		scale = DefaultLossScale
	}
	if window == 0 {
		window = DefaultLossScaleWindow
	}
	return true, scale, window
}

// DefaultConfig is the `small` run.
func DefaultConfig() Config {
	return Config{
		Name: "small", Model: gpt.DefaultConfig(),
		Batch: 8, GradAccum: 1, Steps: 5000, LR: 1e-3, Warmup: 100,
		Schedule: "cosine", Cooldown: 0.2, WeightDecay: 0.1,
		Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, GradClip: 1,
		Seed: 1337, EvalEvery: 100, EvalBatches: 20, SaveEvery: 500,
		Tokenizer: "bpe", ValFraction: 0.1,
	}
}

// ParseConfig reads JSON over DefaultConfig (the model fields over
// gpt.DefaultConfig), refusing unknown fields, and validates the result.
func ParseConfig(data []byte) (Config, error) {
	c := DefaultConfig()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("train: config: %v", err)
	}
	if dec.More() {
		return Config{}, fmt.Errorf("train: config: trailing data after the JSON object")
	}
	return c, c.Validate()
}

// LoadConfig reads a config by name (one of configs.Names()) or from a
// .json file.
func LoadConfig(nameOrPath string) (Config, error) {
	var data []byte
	var err error
	if strings.HasSuffix(nameOrPath, ".json") || strings.ContainsRune(nameOrPath, os.PathSeparator) {
		data, err = os.ReadFile(nameOrPath)
	} else {
		data, err = configs.Get(nameOrPath)
	}
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", nameOrPath, err)
	}
	return c, nil
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return err
	}
	bad := func(format string, a ...any) error { return fmt.Errorf("train: config: "+format, a...) }
	switch {
	case c.Batch < 1 || c.GradAccum < 1:
		return bad("batch %d, grad_accum %d: both must be at least 1", c.Batch, c.GradAccum)
	case c.Steps < 1:
		return bad("steps %d: want at least 1", c.Steps)
	case !(c.LR > 0) || c.MinLR < 0:
		return bad("lr %g, min_lr %g: want lr > 0 and min_lr >= 0", c.LR, c.MinLR)
	case c.Warmup < 0:
		return bad("warmup %d: want >= 0", c.Warmup)
	case c.Schedule != "cosine" && c.Schedule != "wsd" && c.Schedule != "constant":
		return bad("schedule %q: want \"cosine\", \"wsd\" or \"constant\"", c.Schedule)
	case c.Cooldown < 0 || c.Cooldown > 1:
		return bad("cooldown %g: want a fraction 0..1", c.Cooldown)
	case c.WeightDecay < 0 || c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1 || !(c.Eps > 0):
		return bad("weight_decay %g, beta1 %g, beta2 %g, eps %g: want wd >= 0, betas in [0, 1), eps > 0", c.WeightDecay, c.Beta1, c.Beta2, c.Eps)
	case c.GradClip < 0:
		return bad("grad_clip %g: want >= 0 (0 turns clipping off)", c.GradClip)
	case c.EvalEvery < 0 || c.EvalBatches < 0 || c.SaveEvery < 0:
		return bad("eval_every, eval_batches and save_every must not be negative")
	case c.Tokenizer != "bpe" && c.Tokenizer != "char":
		return bad("tokenizer %q: want \"bpe\" or \"char\"", c.Tokenizer)
	case c.Tokenizer == "bpe" && c.Model.Vocab < 256:
		return bad("a byte-level BPE needs vocab >= 256, got %d", c.Model.Vocab)
	case !(c.ValFraction > 0) || c.ValFraction >= 1:
		return bad("val_fraction %g: want 0 < f < 1", c.ValFraction)
	case c.Precision != "" && c.Precision != "float32" && c.Precision != "bfloat16" && c.Precision != "float16":
		return bad("precision %q: want \"float32\", \"bfloat16\" or \"float16\"", c.Precision)
	case c.LossScale != 0 && !isPow2(c.LossScale):
		return bad("loss_scale %g: want a power of two such as 65536 (0 = 65536), so that unscaling is exact", c.LossScale)
	case c.MaxNonFinite < 0:
		return bad("max_nonfinite %d: want >= 1 (0 = %d)", c.MaxNonFinite, DefaultMaxNonFinite)
	case c.LossScaleWindow < 0:
		return bad("loss_scale_window %d: want > 0 (0 = 2000)", c.LossScaleWindow)
	}
	return c.validateOptimizer()
}

// validateOptimizer checks optimizer and the muon_* fields, one line per
// bad value.
func (c Config) validateOptimizer() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("train: config: "+format, a...) }
	switch {
	case c.Optimizer != "" && c.Optimizer != "adamw" && c.Optimizer != "muon":
		return bad("optimizer %q: want \"adamw\" or \"muon\"", c.Optimizer)
	case c.Optimizer != "muon" && (c.MuonLR != 0 || c.MuonMomentum != 0 || c.MuonNSSteps != 0 || c.MuonWeightDecay != 0):
		return bad("muon_* fields are set but the optimizer is \"adamw\"; add \"optimizer\": \"muon\" or remove them")
	case !(c.MuonLR >= 0) || math.IsInf(c.MuonLR, 0):
		return bad("muon_lr %g: want a finite value > 0 (0 = %g)", c.MuonLR, DefaultMuonLR)
	case !(c.MuonMomentum >= 0 && c.MuonMomentum < 1):
		return bad("muon_momentum %g: want 0 < μ < 1 (0 = %g)", c.MuonMomentum, DefaultMuonMomentum)
	case c.MuonNSSteps < 0 || c.MuonNSSteps > 100:
		return bad("muon_ns_steps %d: want 1..100 Newton–Schulz iterations (0 = %d)", c.MuonNSSteps, DefaultMuonNSSteps)
	case !(c.MuonWeightDecay >= 0) || math.IsInf(c.MuonWeightDecay, 0):
		return bad("muon_weight_decay %g: want a finite value >= 0", c.MuonWeightDecay)
	}
	return nil
}

// Defaults of the muon_* fields (optim.DefaultMuonConfig's).
const (
	DefaultMuonLR       = 0.02
	DefaultMuonMomentum = 0.95
	DefaultMuonNSSteps  = 5
)

// OptimizerName is "adamw" or "muon".
func (c Config) OptimizerName() string {
	if c.Optimizer == "" {
		return "adamw"
	}
	return c.Optimizer
}

// OptimizerSummary is the optimizer and its settings in one line, for
// front ends: "adamw, betas (0.9, 0.95), eps 1e-08, weight decay 0.1" or
// "muon (lr 0.02, momentum 0.95 Nesterov, 5 Newton–Schulz steps, weight
// decay 0) on the blocks' matrices; adamw (…) on the rest".
func (c Config) OptimizerSummary() string {
	adam := fmt.Sprintf("betas (%g, %g), eps %g, weight decay %g", c.Beta1, c.Beta2, c.Eps, c.WeightDecay)
	if c.OptimizerName() != "muon" {
		return "adamw, " + adam
	}
	m := c.Muon()
	return fmt.Sprintf("muon (peak lr %g, momentum %g Nesterov, %d Newton–Schulz steps, weight decay %g) on the blocks' matrices; adamw (%s) on the rest",
		m.LR, m.Momentum, m.NSSteps, m.WeightDecay, adam)
}

// Muon returns the Muon settings (optimizer "muon"), with the AdamW
// group's from AdamW.
func (c Config) Muon() optim.MuonConfig {
	m := optim.DefaultMuonConfig()
	m.AdamW = c.AdamW()
	if c.MuonLR != 0 {
		m.LR = c.MuonLR
	}
	if c.MuonMomentum != 0 {
		m.Momentum = c.MuonMomentum
	}
	if c.MuonNSSteps != 0 {
		m.NSSteps = c.MuonNSSteps
	}
	m.WeightDecay = c.MuonWeightDecay
	return m
}

// NewOptimizer returns a fresh optimizer of c's kind over params (named
// as gpt.Model names them): AdamW with DecayGroups, or Muon split by
// optim.HiddenMatrix.
func (c Config) NewOptimizer(params []*forge.Tensor) optim.Optimizer {
	if c.OptimizerName() == "muon" {
		return optim.NewMuon(params, c.Muon())
	}
	return optim.NewAdamWGroups(optim.DecayGroups(params, c.WeightDecay), c.AdamW())
}

// isPow2 reports whether x is a finite power of two, 2⁻¹⁰⁰⁰ to 2¹⁰⁰⁰.
func isPow2(x float64) bool {
	frac, exp := math.Frexp(x)
	return frac == 0.5 && exp > -1000 && exp < 1000
}

// LRSchedule returns the learning-rate schedule c describes.
func (c Config) LRSchedule() optim.Schedule {
	minLR := c.MinLR
	if minLR == 0 {
		minLR = c.LR / 10
	}
	switch c.Schedule {
	case "wsd":
		return optim.WSD{LR: c.LR, MinLR: minLR, Warmup: c.Warmup, Decay: int(c.Cooldown * float64(c.Steps)), Total: c.Steps}
	case "constant":
		return optim.WSD{LR: c.LR, MinLR: c.LR, Warmup: c.Warmup, Total: 1 << 62}
	}
	return optim.WarmupCosine{LR: c.LR, MinLR: minLR, Warmup: c.Warmup, Total: c.Steps}
}

// TokensPerStep is batch × context × grad_accum.
func (c Config) TokensPerStep() int { return c.Batch * c.Model.Context * c.GradAccum }

// AdamW returns the optimizer settings (lr set per step by the schedule).
func (c Config) AdamW() optim.AdamWConfig {
	return optim.AdamWConfig{LR: c.LR, Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
}
