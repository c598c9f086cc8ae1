package optim

import (
	"math"
	"slices"
	"strings"

	"github.com/forgeml/forge/forge"
)

// The quintic Newton–Schulz iteration of Muon: X ← a·X + (b·A + c·A²)·X
// with A = X·Xᵀ. These coefficients push every singular value of a
// matrix with spectral norm ≤ 1 into roughly [0.7, 1.2] in five
// iterations (they trade exact convergence to 1 for speed near 0).
const (
	NSCoefA = 3.4445
	NSCoefB = -4.7750
	NSCoefC = 2.0315
)

// MuonConfig holds Muon's hyperparameters; start from DefaultMuonConfig.
type MuonConfig struct {
	LR          float64     // the Muon group's learning rate, 0.02 (SetLR moves it with the AdamW group's)
	Momentum    float64     // μ, 0.95
	Nesterov    bool        // the update uses g + μ·m (true) or m (false)
	NSSteps     int         // Newton–Schulz iterations, 5
	Eps         float64     // added to ‖X‖_F before normalising, 1e-7
	WeightDecay float64     // decoupled decay of the Muon group, p ← p·(1 − lr·wd); 0
	AdamW       AdamWConfig // the other parameters (embedding, head, norms, biases)
}

// DefaultMuonConfig returns Muon's defaults: LR 0.02, momentum 0.95
// (Nesterov), 5 Newton–Schulz steps, eps 1e-7, no weight decay on the
// Muon group, and DefaultAdamWConfig for the rest.
func DefaultMuonConfig() MuonConfig {
	return MuonConfig{LR: 0.02, Momentum: 0.95, Nesterov: true, NSSteps: 5, Eps: 1e-7, AdamW: DefaultAdamWConfig()}
}

func checkMuonConfig(c MuonConfig) {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		panic(errorf("muon", "learning rate must be finite and ≥ 0, got %v", c.LR))
	case !(c.Momentum >= 0 && c.Momentum < 1):
		panic(errorf("muon", "momentum must be in [0, 1), got %v", c.Momentum))
	case c.NSSteps < 1 || c.NSSteps > 100:
		panic(errorf("muon", "Newton–Schulz steps must be 1 to 100, got %d", c.NSSteps))
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		panic(errorf("muon", "Eps must be finite and > 0, got %v (start from optim.DefaultMuonConfig())", c.Eps))
	case !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0):
		panic(errorf("muon", "weight decay must be finite and ≥ 0, got %v", c.WeightDecay))
	case !(c.AdamW.LR > 0):
		panic(errorf("muon", "the AdamW group's learning rate must be > 0 (SetLR scales the Muon group's by it), got %v", c.AdamW.LR))
	}
	checkConfig(c.AdamW)
}

// HiddenMatrix is Muon's default rule for which parameters it updates: the
// 2-D weights inside a transformer's blocks (a name starting "blocks.":
// the attention and MLP projections). The embedding, the head, norm gains
// and biases — and anything else — go to AdamW.
func HiddenMatrix(name string, shape []int) bool {
	return len(shape) == 2 && strings.HasPrefix(name, "blocks.")
}

// MuonSplit divides params by rule (HiddenMatrix when nil) into those
// Muon updates and the rest, keeping their order.
func MuonSplit(params []*forge.Tensor, rule func(name string, shape []int) bool) (muon, rest []*forge.Tensor) {
	if rule == nil {
		rule = HiddenMatrix
	}
	for _, p := range params {
		if rule(p.Name(), p.Shape()) {
			muon = append(muon, p)
		} else {
			rest = append(rest, p)
		}
	}
	return muon, rest
}

// Muon updates a network's hidden weight matrices with momentum
// orthogonalised by a Newton–Schulz iteration, and every other parameter
// with AdamW. For a parameter P of shape (rows, cols) with gradient G
// (after the clip's coefficient), μ the momentum and lr the Muon group's
// learning rate:
//
//	M = μ·M + G                                 (M starts at 0)
//	U = G + μ·M                                 (Nesterov; M without it)
//	X = U / (‖U‖_F + eps);  Xᵀ if rows > cols   (so X·Xᵀ is the small Gram matrix)
//	repeat NSSteps (5) times:
//	    A = X·Xᵀ
//	    X = a·X + (b·A + c·A·A)·X               (a, b, c = 3.4445, −4.7750, 2.0315)
//	O = X, transposed back if it was
//	P = P·(1 − lr·wd) − lr·√max(1, rows/cols)·O
//
// O approximates the orthogonal factor U·(UᵀU)^(−1/2) of U's polar
// decomposition, its singular values in about [0.7, 1.2] rather than
// exactly 1. The scale √max(1, rows/cols) (rows: output features; the
// original Muon's) gives every shape an update RMS of about 1/√cols (an
// orthogonal O has RMS 1/√max(rows, cols)); it is not matched to AdamW's
// update RMS, so the Muon group has its own, larger learning rate
// (MuonConfig.LR, 0.02). The momentum form M = μ·M + G differs from an
// exponential average (1−μ)·G + μ·M only by the factor 1−μ, which the
// normalisation removes (up to eps).
//
// The other parameters (the AdamW group) are updated by an AdamW
// (DecayGroups over them: weight decay on rank ≥ 2 only) whose step count
// is Muon's. SetLR(lr) sets the AdamW group's learning rate to lr and the
// Muon group's to MuonConfig.LR·lr/MuonConfig.AdamW.LR, so one schedule
// drives both in proportion.
//
// Every matmul of the iteration runs on the parameter's device through
// forge's ops; nothing is read back to the host. With a deferred clip
// (StepClipped) the clip's coefficient and skip flag are read on the
// device (forge.GradClip.Factors): a skipped step leaves parameters and
// momenta unchanged and is not counted, as with AdamW.
type Muon struct {
	cfg    MuonConfig
	lr     float64         // the Muon group's current learning rate
	muon   []*forge.Tensor // the Muon group, each 2-D
	mom    []*forge.Tensor // momentum, one per muon param
	adam   *AdamW          // the rest
	params []*forge.Tensor // muon then adam's, the order of Params

	eyes map[eyeKey][2]*forge.Tensor // NSCoefA·I and NSCoefB·I by size, made once
}

// NewMuon returns a Muon over params, split by HiddenMatrix (MuonSplit).
func NewMuon(params []*forge.Tensor, cfg MuonConfig) *Muon {
	muon, rest := MuonSplit(params, nil)
	return NewMuonWith(muon, DecayGroups(rest, cfg.AdamW.WeightDecay), cfg)
}

// NewMuonWith returns a Muon updating muon (2-D float parameters) with
// Muon and adamGroups with AdamW (cfg.AdamW.WeightDecay is ignored in
// favour of the groups'). The momenta are allocated, as zeros, next to
// each parameter.
func NewMuonWith(muon []*forge.Tensor, adamGroups []ParamGroup, cfg MuonConfig) *Muon {
	checkMuonConfig(cfg)
	o := &Muon{cfg: cfg, lr: cfg.LR, muon: slices.Clone(muon)}
	o.adam = NewAdamWGroups(adamGroups, cfg.AdamW)
	seen := map[*forge.Tensor]bool{}
	for _, p := range o.adam.params {
		seen[p] = true
	}
	for _, p := range muon {
		switch {
		case p == nil:
			panic(errorf("muon", "the Muon group holds a nil parameter"))
		case p.Dim() != 2:
			panic(errorf("muon", "parameter %q %v is not a matrix; Muon updates 2-D parameters only (give it to AdamW)", p.Name(), p.Shape()))
		case !p.DType().IsFloat():
			panic(errorf("muon", "parameter %q %v is %v; parameters must be float", p.Name(), p.Shape(), p.DType()))
		case seen[p]:
			panic(errorf("muon", "parameter %q %v appears twice", p.Name(), p.Shape()))
		}
		seen[p] = true
		var m *forge.Tensor
		forge.NoGrad(func() { m = forge.ZerosLike(p) })
		o.mom = append(o.mom, m)
	}
	o.params = append(slices.Clone(o.muon), o.adam.params...)
	return o
}

// Params returns the optimized parameters: the Muon group, then the AdamW
// group's in its group order.
func (o *Muon) Params() []*forge.Tensor { return slices.Clone(o.params) }

// MuonParams returns the Muon group (the order of MuonState.Momentum).
func (o *Muon) MuonParams() []*forge.Tensor { return slices.Clone(o.muon) }

// AdamW returns the optimizer of the other parameters.
func (o *Muon) AdamW() *AdamW { return o.adam }

// Config returns the hyperparameters, with the current learning rates.
func (o *Muon) Config() MuonConfig {
	c := o.cfg
	c.LR, c.AdamW = o.lr, o.adam.Config()
	return c
}

// LR returns the AdamW group's current learning rate (what SetLR set).
func (o *Muon) LR() float64 { return o.adam.LR() }

// MuonLR returns the Muon group's current learning rate.
func (o *Muon) MuonLR() float64 { return o.lr }

// SetLR sets the AdamW group's learning rate to lr and the Muon group's to
// lr times MuonConfig.LR/MuonConfig.AdamW.LR.
func (o *Muon) SetLR(lr float64) {
	o.adam.SetLR(lr)
	o.lr = o.cfg.LR * lr / o.cfg.AdamW.LR
}

// StepCount returns the number of steps taken (not counting steps a clip
// skipped; see AdamW.StepCount).
func (o *Muon) StepCount() int { return o.adam.StepCount() }

// ZeroGrad clears every parameter's gradient.
func (o *Muon) ZeroGrad() {
	for _, p := range o.params {
		p.ZeroGrad()
	}
}

// Step applies one update to every parameter that has a gradient, in
// place, recording no graph; its kernels are attributed to
// forge.PhaseOptimizer.
func (o *Muon) Step() { o.step1(nil) }

// StepClipped is Step with the gradients scaled by the clip c
// (ClipGradNormDeferred), skipped when c skips (a non-finite norm), with
// nothing read back (see AdamW.StepClipped).
func (o *Muon) StepClipped(c *forge.GradClip) {
	if c == nil {
		panic(errorf("muon", "StepClipped needs a clip (ClipGradNormDeferred); use Step without one"))
	}
	o.step1(c)
}

func (o *Muon) step1(c *forge.GradClip) {
	if c != nil {
		o.adam.StepClipped(c)
	} else {
		o.adam.Step()
	}
	forge.WithPhase(forge.PhaseOptimizer, func() {
		forge.NoGrad(func() { forge.Independent(func() { o.update(c) }) })
	})
}

// update queues the Muon group's updates.
func (o *Muon) update(c *forge.GradClip) {
	type key struct {
		dev *forge.Device
		dt  forge.DType
	}
	type factors struct{ coef, skip *forge.Tensor }
	byGrad := map[key]factors{}
	mu, lr, wd := o.cfg.Momentum, o.lr, o.cfg.WeightDecay
	for i, p := range o.muon {
		g := p.Grad()
		if g == nil {
			continue
		}
		var f factors
		if c != nil {
			k := key{g.Device(), g.DType()}
			var ok bool
			if f, ok = byGrad[k]; !ok {
				f.coef, f.skip = c.Factors(k.dev, k.dt)
				forge.Keep(f.coef, f.skip) // shared by the parameters' updates
				byGrad[k] = f
			}
		}
		// Each matrix's temporaries (the iteration's Gram matrices) are
		// dead once its update is queued: free them then, so a step's
		// optimizer phase holds one matrix's worth, not all of them.
		forge.Collect(func() { o.update1(i, p, g, f.coef, f.skip, mu, lr, wd) })
	}
}

// update1 queues the update of o.muon[i], p, from its gradient g times
// coef; skip is the clip's skip flag (coef and skip nil: no clip).
func (o *Muon) update1(i int, p, g, coef, skip *forge.Tensor, mu, lr, wd float64) {
	if coef != nil {
		g = g.Mul(coef)
	}
	g = g.Cast(p.DType())
	if skip != nil {
		skip = skip.Cast(p.DType())
	}
	m := o.mom[i]
	mNew := m.MulScalar(mu).Add(g)
	u := mNew
	if o.cfg.Nesterov {
		u = g.Add(mNew.MulScalar(mu))
	}
	orth := newtonSchulz(u, o.cfg.NSSteps, o.cfg.Eps, o.identities)
	rows, cols := p.Size(0), p.Size(1)
	scale := math.Sqrt(max(1, float64(rows)/float64(cols)))
	w := p
	if wd != 0 {
		w = p.MulScalar(1 - lr*wd)
	}
	pNew := w.Sub(orth.MulScalar(lr * scale))
	if skip != nil {
		mNew = forge.Where(skip, m, mNew)
		pNew = forge.Where(skip, p, pNew)
	}
	m.CopyFrom(mNew)
	p.CopyFrom(pNew)
}

// NewtonSchulz returns the quintic Newton–Schulz approximation of the
// orthogonal polar factor of the matrix g (rows, cols), as Muon uses it:
// X = g/(‖g‖_F + eps), transposed when rows > cols, then steps iterations
// of X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ and (a, b, c) = (NSCoefA,
// NSCoefB, NSCoefC), transposed back. It runs on g's device and dtype
// (forge ops; call it under forge.NoGrad unless a graph is wanted).
func NewtonSchulz(g *forge.Tensor, steps int, eps float64) *forge.Tensor {
	return newtonSchulz(g, steps, eps, nsIdentities)
}

// newtonSchulz is NewtonSchulz with the scaled identities a·I and b·I of
// size r from eye. Each iteration is computed as
//
//	A = X·Xᵀ;  X = (A·(c·A + b·I) + a·I)·X
//
// — the same polynomial, with the elementwise work on the small (r, r)
// side only (three passes instead of five, two of them (r, max)).
func newtonSchulz(g *forge.Tensor, steps int, eps float64, eye func(like *forge.Tensor, r int) (aI, bI *forge.Tensor)) *forge.Tensor {
	if g.Dim() != 2 {
		panic(errorf("newton_schulz", "want a matrix, got shape %v", g.Shape()))
	}
	x := g.Div(g.Square().Sum().Sqrt().AddScalar(eps))
	tall := g.Size(0) > g.Size(1)
	if tall {
		x = x.T()
	}
	aI, bI := eye(g, min(g.Size(0), g.Size(1)))
	for range steps {
		a := x.MatMul(x.T())                                // (r, r), r = min(rows, cols)
		p := a.MatMul(a.MulScalar(NSCoefC).Add(bI)).Add(aI) // (r, r): a·I + b·A + c·A²
		x = p.MatMul(x)                                     // (r, max)
	}
	if tall {
		x = x.T()
	}
	return x
}

// nsIdentities returns NSCoefA·I and NSCoefB·I of size r on like's device
// and dtype, made there (an iota compared with its transpose).
func nsIdentities(like *forge.Tensor, r int) (aI, bI *forge.Tensor) {
	i := forge.Arange(0, float64(r), 1).To(like.Device()).Cast(like.DType())
	eye := i.Reshape(r, 1).Eq(i.Reshape(1, r)) // (r, r)
	return eye.MulScalar(NSCoefA), eye.MulScalar(NSCoefB)
}

// identities returns nsIdentities for like and r, made once per (device,
// dtype, size) and kept.
func (o *Muon) identities(like *forge.Tensor, r int) (aI, bI *forge.Tensor) {
	k := eyeKey{like.Device(), like.DType(), r}
	if e, ok := o.eyes[k]; ok {
		return e[0], e[1]
	}
	aI, bI = nsIdentities(like, r)
	forge.Keep(aI, bI) // made inside a matrix's forge.Collect, used by the next ones
	if o.eyes == nil {
		o.eyes = map[eyeKey][2]*forge.Tensor{}
	}
	o.eyes[k] = [2]*forge.Tensor{aI, bI}
	return aI, bI
}

type eyeKey struct {
	dev *forge.Device
	dt  forge.DType
	r   int
}

// MuonState is a Muon's state for checkpointing: the AdamW group's state
// (its Step is Muon's step count) and the Muon group's momenta, one per
// parameter in MuonParams order.
type MuonState struct {
	AdamW    AdamWState
	Momentum []*forge.Tensor
}

// State returns the optimizer state; the tensors are the live buffers
// (see AdamW.State).
func (o *Muon) State() MuonState {
	return MuonState{AdamW: o.adam.State(), Momentum: slices.Clone(o.mom)}
}

// LoadState copies s into the optimizer; the momenta must match the Muon
// group's count and shapes. The source tensors are not retained.
func (o *Muon) LoadState(s MuonState) {
	if len(s.Momentum) != len(o.muon) {
		panic(errorf("muon.load_state", "state has %d momenta for %d parameters", len(s.Momentum), len(o.muon)))
	}
	for i, p := range o.muon {
		if u := s.Momentum[i]; u == nil || !slices.Equal(u.Shape(), p.Shape()) {
			var got any = "nil"
			if u != nil {
				got = u.Shape()
			}
			panic(errorf("muon.load_state", "momentum %d has shape %v, parameter %q has %v", i, got, p.Name(), p.Shape()))
		}
	}
	o.adam.LoadState(s.AdamW)
	forge.NoGrad(func() {
		for i, p := range o.muon {
			o.mom[i].CopyFrom(s.Momentum[i].To(p.Device()))
		}
	})
}

// Describe lists the parameter groups: the Muon group, then the AdamW
// groups.
func (o *Muon) Describe() []GroupInfo {
	out := []GroupInfo{{Optimizer: "muon", LR: o.lr, WeightDecay: o.cfg.WeightDecay, Params: names(o.muon), Elements: numel(o.muon)}}
	return append(out, o.adam.Describe()...)
}
