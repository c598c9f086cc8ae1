package optim

import (
	"math"
	"slices"

	"github.com/forgeml/forge/forge"
)

// AdamWConfig holds AdamW's hyperparameters. NewAdamW uses them as given
// (a zero Eps is rejected); start from DefaultAdamWConfig for the usual
// values.
type AdamWConfig struct {
	LR          float64 // learning rate (SetLR changes it, e.g. from a Schedule)
	Beta1       float64 // first-moment decay, 0.9
	Beta2       float64 // second-moment decay, 0.95
	Eps         float64 // added to sqrt(v̂), outside the square root; 1e-8
	WeightDecay float64 // decoupled weight decay of rank ≥ 2 parameters; 0.1
}

// DefaultAdamWConfig returns the GPT-training defaults: LR 3e-4, betas
// (0.9, 0.95), eps 1e-8, weight decay 0.1.
func DefaultAdamWConfig() AdamWConfig {
	return AdamWConfig{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
}

// AdamW is the Adam optimizer with decoupled weight decay, computing
// exactly what torch.optim.AdamW (and llm.c) computes. With t the 1-based
// step count, for each parameter w with gradient g:
//
//	m = β1·m + (1−β1)·g
//	v = β2·v + (1−β2)·g²
//	w = w·(1 − lr·wd) − lr/(1−β1ᵗ) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
//
// eps is outside the square root and the decay never passes through m
// and v. Parameters without a gradient are skipped; the step count is
// shared by all parameters (llm.c), so a parameter that misses steps
// gets the bias correction of the global step.
//
// Each parameter is updated by one fused kernel (forge.AdamWUpdate: m, v
// and w in one pass, each element computed in float64 on the CPU); a
// parameter that is a non-contiguous view falls back to the same update
// composed from elementwise ops.
type AdamW struct {
	cfg    AdamWConfig
	groups []ParamGroup
	params []*forge.Tensor // all groups' params, in group order
	decay  []float64       // per param
	m, v   []*forge.Tensor
	step   int

	// pending is the clip of the last StepClipped until its skip flag has
	// been read: a skipped step does not count (settle).
	pending *forge.GradClip
}

// NewAdamW returns an AdamW over params. Weight decay cfg.WeightDecay
// applies only to parameters with Dim() ≥ 2; biases and norm gains
// (rank < 2) are not decayed (see DecayGroups). Use NewAdamWGroups to
// choose the groups yourself.
func NewAdamW(params []*forge.Tensor, cfg AdamWConfig) *AdamW {
	return NewAdamWGroups(DecayGroups(params, cfg.WeightDecay), cfg)
}

// NewAdamWGroups returns an AdamW over explicit parameter groups, each with
// its own weight decay (cfg.WeightDecay is ignored). The moments are
// allocated, as zeros, next to each parameter.
func NewAdamWGroups(groups []ParamGroup, cfg AdamWConfig) *AdamW {
	checkConfig(cfg)
	o := &AdamW{cfg: cfg}
	seen := map[*forge.Tensor]bool{}
	for gi, g := range groups {
		if g.WeightDecay < 0 || math.IsNaN(g.WeightDecay) {
			panic(errorf("adamw", "group %d: weight decay must be ≥ 0, got %v", gi, g.WeightDecay))
		}
		o.groups = append(o.groups, ParamGroup{Params: slices.Clone(g.Params), WeightDecay: g.WeightDecay})
		for _, p := range g.Params {
			if p == nil {
				panic(errorf("adamw", "group %d holds a nil parameter", gi))
			}
			if !p.DType().IsFloat() {
				panic(errorf("adamw", "parameter %q %v is %v; parameters must be float", p.Name(), p.Shape(), p.DType()))
			}
			if seen[p] {
				panic(errorf("adamw", "parameter %q %v appears twice", p.Name(), p.Shape()))
			}
			seen[p] = true
			o.params = append(o.params, p)
			o.decay = append(o.decay, g.WeightDecay)
			var m, v *forge.Tensor
			forge.NoGrad(func() { m, v = forge.ZerosLike(p), forge.ZerosLike(p) })
			o.m = append(o.m, m)
			o.v = append(o.v, v)
		}
	}
	return o
}

func checkConfig(c AdamWConfig) {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		panic(errorf("adamw", "learning rate must be finite and ≥ 0, got %v", c.LR))
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		panic(errorf("adamw", "Beta1 must be in [0, 1), got %v", c.Beta1))
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		panic(errorf("adamw", "Beta2 must be in [0, 1), got %v", c.Beta2))
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		panic(errorf("adamw", "Eps must be finite and > 0, got %v (start from optim.DefaultAdamWConfig())", c.Eps))
	case !(c.WeightDecay >= 0):
		panic(errorf("adamw", "weight decay must be ≥ 0, got %v", c.WeightDecay))
	}
}

// Params returns the optimized parameters, in group order (the order of
// State's M and V).
func (o *AdamW) Params() []*forge.Tensor { return slices.Clone(o.params) }

// Groups returns the parameter groups.
func (o *AdamW) Groups() []ParamGroup {
	out := make([]ParamGroup, len(o.groups))
	for i, g := range o.groups {
		out[i] = ParamGroup{Params: slices.Clone(g.Params), WeightDecay: g.WeightDecay}
	}
	return out
}

// Describe lists the parameter groups (empty ones left out).
func (o *AdamW) Describe() []GroupInfo {
	var out []GroupInfo
	for _, g := range o.groups {
		if len(g.Params) > 0 {
			out = append(out, GroupInfo{Optimizer: "adamw", LR: o.cfg.LR, WeightDecay: g.WeightDecay, Params: names(g.Params), Elements: numel(g.Params)})
		}
	}
	return out
}

// Config returns the hyperparameters, with the current learning rate.
func (o *AdamW) Config() AdamWConfig { return o.cfg }

// LR returns the current learning rate.
func (o *AdamW) LR() float64 { return o.cfg.LR }

// SetLR sets the learning rate used by the next Step.
func (o *AdamW) SetLR(lr float64) {
	if !(lr >= 0) || math.IsInf(lr, 0) {
		panic(errorf("adamw", "learning rate must be finite and ≥ 0, got %v", lr))
	}
	o.cfg.LR = lr
}

// StepCount returns the number of steps taken (t of the last step). After
// StepClipped it reads the clip's skip flag (a skipped step is not
// counted), which on a queueing device waits for the step's kernels if
// the clip was not read yet.
func (o *AdamW) StepCount() int {
	o.settle()
	return o.step
}

// settle resolves the step count of a StepClipped whose clip was not read:
// if the clip skipped the update, the step did not happen.
func (o *AdamW) settle() {
	if c := o.pending; c != nil {
		o.pending = nil
		if c.Skipped() {
			o.step--
		}
	}
}

// ZeroGrad clears every parameter's gradient.
func (o *AdamW) ZeroGrad() {
	for _, p := range o.params {
		p.ZeroGrad()
	}
}

// Step applies one AdamW update to every parameter that has a gradient,
// in place. It records no graph and its kernels are attributed to
// forge.PhaseOptimizer.
func (o *AdamW) Step() { o.step1(nil) }

// StepClipped is Step with the gradients scaled by the clip c
// (ClipGradNormDeferred): each parameter's fused kernel reads its
// gradient times c's coefficient, on the device, and leaves the parameter
// unchanged when c skips the step (a non-finite norm) — then the step is
// not counted either. Nothing is read back: the gradients are not
// modified, and the skip flag is read when the step count is next needed
// (StepCount, State, the next step), normally after the caller has read
// the loss and c.Norm() in the same wait.
func (o *AdamW) StepClipped(c *forge.GradClip) {
	if c == nil {
		panic(errorf("adamw", "StepClipped needs a clip (ClipGradNormDeferred); use Step without one"))
	}
	o.step1(c)
}

func (o *AdamW) step1(c *forge.GradClip) {
	o.settle()
	o.step++
	o.pending = c
	t := float64(o.step)
	b1, b2 := o.cfg.Beta1, o.cfg.Beta2
	lr, eps := o.cfg.LR, o.cfg.Eps
	bc1 := 1 - math.Pow(b1, t)
	bc2Sqrt := math.Sqrt(1 - math.Pow(b2, t))
	stepSize := lr / bc1
	forge.WithPhase(forge.PhaseOptimizer, func() {
		// Each parameter's update touches only its own parameter, gradient
		// and moments: a device may run them at once.
		forge.NoGrad(func() { forge.Independent(func() { o.update(c, lr, b1, b2, eps, bc2Sqrt, stepSize) }) })
	})
}

// update queues the per-parameter updates of step1.
func (o *AdamW) update(c *forge.GradClip, lr, b1, b2, eps, bc2Sqrt, stepSize float64) {
	for i, p := range o.params {
		g := p.Grad()
		if g == nil {
			continue
		}
		m, v := o.m[i], o.v[i]
		if p.IsContiguous() && m.IsContiguous() && v.IsContiguous() && g.DType() == p.DType() {
			// One fused kernel: m, v and the parameter in one pass.
			ap := forge.AdamWParams{LR: lr, Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: o.decay[i], Step: o.step}
			if c != nil {
				forge.AdamWUpdateClipped(p, g, m, v, c, ap)
			} else {
				forge.AdamWUpdate(p, g, m, v, ap)
			}
			continue
		}
		if c != nil {
			// The composed update needs the clip on the host.
			if c.Skipped() {
				continue
			}
			if coef := c.Coef(); coef != 1 {
				g = g.MulScalar(coef)
			}
		}
		m.CopyFrom(m.MulScalar(b1).Add(g.MulScalar(1 - b1)))
		v.CopyFrom(v.MulScalar(b2).Add(g.Square().MulScalar(1 - b2)))
		denom := v.Sqrt().DivScalar(bc2Sqrt).AddScalar(eps)
		w := p
		if wd := o.decay[i]; wd != 0 {
			w = p.MulScalar(1 - lr*wd)
		}
		p.CopyFrom(w.Sub(m.Div(denom).MulScalar(stepSize)))
	}
}

// AdamWState is an AdamW's state for checkpointing: the step count and the
// first and second moments, one per parameter in Params order.
type AdamWState struct {
	Step int
	M, V []*forge.Tensor
}

// State returns the optimizer state. The tensors are the live moments (the
// next Step overwrites them in place): read or save them, do not keep them
// across steps expecting a snapshot.
func (o *AdamW) State() AdamWState {
	o.settle()
	return AdamWState{Step: o.step, M: slices.Clone(o.m), V: slices.Clone(o.v)}
}

// LoadState copies s (e.g. read back from a checkpoint) into the
// optimizer: the step count and the moments' values, which must match the
// parameters' count and shapes. The source tensors are not retained.
func (o *AdamW) LoadState(s AdamWState) {
	if s.Step < 0 {
		panic(errorf("adamw.load_state", "negative step count %d", s.Step))
	}
	if len(s.M) != len(o.params) || len(s.V) != len(o.params) {
		panic(errorf("adamw.load_state", "state has %d first and %d second moments for %d parameters", len(s.M), len(s.V), len(o.params)))
	}
	for i, p := range o.params {
		for _, u := range []*forge.Tensor{s.M[i], s.V[i]} {
			if u == nil || !slices.Equal(u.Shape(), p.Shape()) {
				var got any = "nil"
				if u != nil {
					got = u.Shape()
				}
				panic(errorf("adamw.load_state", "moment %d has shape %v, parameter %q has %v", i, got, p.Name(), p.Shape()))
			}
		}
	}
	forge.NoGrad(func() {
		for i, p := range o.params {
			o.m[i].CopyFrom(s.M[i].To(p.Device()))
			o.v[i].CopyFrom(s.V[i].To(p.Device()))
		}
	})
	o.step = s.Step
	o.pending = nil
}
