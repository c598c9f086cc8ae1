package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
)

// Batches yields training batches: inputs and next-token targets, each
// batch × context int32 ids (a *data.Loader is one).
type Batches interface {
	Next() (x, y []int32)
}

// EvalBatches yields the fixed batches a validation loss is computed on.
type EvalBatches func() (xs, ys [][]int32)

// Metrics is the record of one optimizer step.
type Metrics struct {
	Step         int      `json:"step"`               // 1-based: the number of updates done
	Loss         float64  `json:"loss"`               // mean training loss over the step's micro-batches
	ValLoss      *float64 `json:"val_loss,omitempty"` // when a validation loss was computed after this step
	LR           float64  `json:"lr"`                 // learning rate used
	GradNorm     float64  `json:"grad_norm"`          // global gradient norm before clipping
	TokensPerSec float64  `json:"tokens_per_sec"`     // training tokens / step time
	StepMS       float64  `json:"step_ms"`            // wall time of the step
	Tokens       int64    `json:"tokens"`             // training tokens seen so far
	Skipped      bool     `json:"skipped,omitempty"`  // non-finite gradient: no update made
	Time         string   `json:"time,omitempty"`     // RFC 3339, when the step ended

	LossScale float64 `json:"loss_scale,omitempty"` // float16: the loss scale this step's backward used

	Memory *StepMemory `json:"memory,omitempty"` // the device memory ledger; nil where the device does not count memory

	Router *RouterMetrics `json:"router,omitempty"` // a mixture of experts' routing; nil for a plain model
}

// RouterMetrics is the routing of a mixture-of-experts model over one
// step's micro-batches (gpt.Model.RouterStats). A load is an expert's
// share of its block's token assignments times n_experts: 1 everywhere
// when the routing is balanced, 0 for an expert that received nothing.
type RouterMetrics struct {
	Aux     float64 `json:"aux"`      // load-balancing loss, mean over blocks and micro-batches (1 = balanced)
	LoadMax float64 `json:"load_max"` // the largest load of any expert of any block
	LoadMin float64 `json:"load_min"` // the smallest
	Tokens  [][]int `json:"tokens"`   // (L, E) assignments per block and expert, summed over micro-batches
}

// routerAcc sums gpt.Model.RouterStats over micro-batches.
type routerAcc struct {
	aux    float64
	n      int
	tokens [][]int
}

func (a *routerAcc) add(stats []nn.RouterStats) {
	if stats == nil {
		return
	}
	if a.tokens == nil {
		a.tokens = make([][]int, len(stats))
		for i, s := range stats {
			a.tokens[i] = make([]int, len(s.Tokens))
		}
	}
	for i, s := range stats {
		a.aux += s.Aux
		a.n++
		for e, c := range s.Tokens {
			a.tokens[i][e] += c
		}
	}
}

func (a *routerAcc) result() *RouterMetrics {
	if a.n == 0 {
		return nil
	}
	r := &RouterMetrics{Aux: a.aux / float64(a.n), LoadMax: math.Inf(-1), LoadMin: math.Inf(1), Tokens: a.tokens}
	for _, blk := range a.tokens {
		sum := 0
		for _, c := range blk {
			sum += c
		}
		for _, c := range blk {
			load := float64(c) * float64(len(blk)) / float64(max(sum, 1))
			r.LoadMax, r.LoadMin = max(r.LoadMax, load), min(r.LoadMin, load)
		}
	}
	return r
}

// StepMemory is the device memory of one step's phases, in bytes: the
// peak while the phase ran and what was live when it ended (forward and
// backward: the largest over the step's micro-batches). On a GPU it is
// memory as the pool hands it out while kernels are queued.
type StepMemory struct {
	ForwardPeak   int64 `json:"forward_peak"`
	ForwardLive   int64 `json:"forward_live"`
	BackwardPeak  int64 `json:"backward_peak"`
	BackwardLive  int64 `json:"backward_live"`
	OptimizerPeak int64 `json:"optimizer_peak"`
	OptimizerLive int64 `json:"optimizer_live"`
}

// Peak is the step's peak over its phases.
func (m StepMemory) Peak() int64 { return max(m.ForwardPeak, m.BackwardPeak, m.OptimizerPeak) }

// ledger records a step's StepMemory from dev's counters.
type ledger struct {
	dev *forge.Device
	m   StepMemory
}

// phase reads the peak and live memory since the last call into *peak and
// *live (keeping the larger values) and restarts the peak.
func (l *ledger) phase(peak, live *int64) {
	st := l.dev.Memory()
	*peak, *live = max(*peak, st.Peak), max(*live, st.Live)
	l.dev.ResetPeak()
}

func (l *ledger) result() *StepMemory {
	if l.m == (StepMemory{}) {
		return nil
	}
	return &l.m
}

// MarshalJSON writes a record as JSON. A non-finite loss or gradient norm
// (a skipped step, routine with float16's loss scaling) is written as the
// string "NaN", "+Inf" or "-Inf", which a JSON number cannot hold; other
// records are the plain encoding of the struct.
func (m Metrics) MarshalJSON() ([]byte, error) {
	type plain Metrics
	if finite(m.Loss) && finite(m.GradNorm) {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		plain
		Loss     jsonFloat `json:"loss"`
		GradNorm jsonFloat `json:"grad_norm"`
	}{plain(m), jsonFloat(m.Loss), jsonFloat(m.GradNorm)})
}

// UnmarshalJSON reads a record written by MarshalJSON.
func (m *Metrics) UnmarshalJSON(b []byte) error {
	type plain Metrics
	var aux struct {
		plain
		Loss     jsonFloat `json:"loss"`
		GradNorm jsonFloat `json:"grad_norm"`
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	*m = Metrics(aux.plain)
	m.Loss, m.GradNorm = float64(aux.Loss), float64(aux.GradNorm)
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// jsonFloat is a float64 in JSON: a number, or for NaN and ±Inf a string.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
	if x := float64(f); !finite(x) {
		return json.Marshal(strconv.FormatFloat(x, 'g', -1, 64))
	}
	return json.Marshal(float64(f))
}

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var x float64
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("train: metric %q: not a number", s)
		}
		x = v
	} else if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*f = jsonFloat(x)
	return nil
}

// History is the list of step records, oldest first.
type History struct {
	Steps []Metrics
}

// LastVal returns the latest validation loss and the record holding it
// (nil if no step was evaluated).
func (h *History) LastVal() *Metrics {
	for i := len(h.Steps) - 1; i >= 0; i-- {
		if h.Steps[i].ValLoss != nil {
			return &h.Steps[i]
		}
	}
	return nil
}

// Last returns the latest record (zero if none).
func (h *History) Last() Metrics {
	if len(h.Steps) == 0 {
		return Metrics{}
	}
	return h.Steps[len(h.Steps)-1]
}

// Series returns one metric over the steps that have it: "loss",
// "val_loss", "lr", "grad_norm", "tokens_per_sec", "step_ms" or
// "loss_scale" (float16 runs only), or one of the memory and moe series
// of MetricNames.
// MetricNames are the series History.Series knows. The memory series are
// the step's peak device memory and each phase's (StepMemory), in MB; the
// moe series a mixture of experts' routing (RouterMetrics: the
// load-balancing loss, the largest and smallest expert load).
var MetricNames = []string{"loss", "val_loss", "lr", "grad_norm", "tokens_per_sec", "step_ms", "loss_scale",
	"memory", "memory_forward", "memory_backward", "memory_optimizer", "moe_aux", "moe_load_max", "moe_load_min"}

func (h *History) Series(name string) (steps []int, values []float64, err error) {
	for _, m := range h.Steps {
		var v float64
		switch name {
		case "loss":
			v = m.Loss
		case "val_loss":
			if m.ValLoss == nil {
				continue
			}
			v = *m.ValLoss
		case "lr":
			v = m.LR
		case "grad_norm":
			v = m.GradNorm
		case "tokens_per_sec":
			v = m.TokensPerSec
		case "step_ms":
			v = m.StepMS
		case "loss_scale":
			if m.LossScale == 0 {
				continue // not a float16 step
			}
			v = m.LossScale
		case "memory", "memory_forward", "memory_backward", "memory_optimizer":
			if m.Memory == nil {
				continue // the device does not count memory
			}
			v = float64(map[string]int64{"memory": m.Memory.Peak(), "memory_forward": m.Memory.ForwardPeak,
				"memory_backward": m.Memory.BackwardPeak, "memory_optimizer": m.Memory.OptimizerPeak}[name]) / 1e6
		case "moe_aux", "moe_load_max", "moe_load_min":
			if m.Router == nil {
				continue // not a mixture of experts
			}
			v = map[string]float64{"moe_aux": m.Router.Aux, "moe_load_max": m.Router.LoadMax, "moe_load_min": m.Router.LoadMin}[name]
		default:
			return nil, nil, fmt.Errorf("train: no metric %q; choose one of %s", name, strings.Join(MetricNames, ", "))
		}
		steps = append(steps, m.Step)
		values = append(values, v)
	}
	return steps, values, nil
}

// Trainer trains a model with its config's optimizer (AdamW or Muon) on
// batches from a source:
// Step does one optimizer update, Run many.
type Trainer struct {
	Config  Config
	Model   *gpt.Model
	Opt     optim.Optimizer // *optim.AdamW or *optim.Muon (Config.NewOptimizer)
	Train   Batches
	Val     EvalBatches // nil: Eval returns an error
	History History

	sched  optim.Schedule
	params []*forge.Tensor

	nonFinite int // steps in a row with a non-finite loss or gradient norm
	tokens    int64
	lrSet     *float64    // an lr the user fixed (SetLR), overriding the schedule
	scaler    *lossScaler // float16's dynamic loss scale, or nil
}

// lossScaler is float16's dynamic loss scaling, as torch.amp.GradScaler:
// the backward starts from the loss times scale, the clip divides it out
// of the gradient norm and of AdamW's coefficient (the gradients keep it),
// a step with a non-finite gradient is skipped and halves it (not below
// 1: a run that overflows float16 even unscaled keeps skipping, every
// record saying so — train in bfloat16 then), and window good steps in a
// row double it. The scale is a power of two, so scaling and unscaling are
// exact (barring float32 underflow).
type lossScaler struct {
	scale  float64
	good   int // finite steps since the scale last changed
	window int
}

// update moves the scale after a step.
func (s *lossScaler) update(skipped bool) {
	if skipped {
		s.scale, s.good = max(s.scale/2, 1), 0
		return
	}
	if s.good++; s.good >= s.window {
		s.scale, s.good = s.scale*2, 0
	}
}

// NewTrainer returns a trainer at step 0 with a fresh optimizer. It sets
// the model's compute dtype from cfg.Precision (gpt.Model.SetCompute),
// which fails on a device without 16-bit compute (the CPU).
func NewTrainer(cfg Config, model *gpt.Model, train Batches, val EvalBatches) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, p := range model.Params() {
		if p.Tensor.ReadOnly() {
			return nil, fmt.Errorf("train: the model's weights are read-only (%s maps a .forge file in place: MapRepository); load it with LoadRepository, or open the repository with Open, to train it", p.Name)
		}
	}
	if err := model.SetCompute(cfg.ComputeDType()); err != nil {
		return nil, fmt.Errorf("train: precision %q: %w", cfg.Precision, err)
	}
	params := nn.Tensors(model)
	t := &Trainer{
		Config: cfg, Model: model, Train: train, Val: val,
		Opt:    cfg.NewOptimizer(params),
		sched:  cfg.LRSchedule(),
		params: params,
	}
	if on, scale, window := cfg.lossScaling(); on {
		t.scaler = &lossScaler{scale: scale, window: window}
	}
	return t, nil
}

// LossScale returns the loss scale the next step will use: float16's
// dynamic scale, 1 for other precisions.
func (t *Trainer) LossScale() float64 {
	if t.scaler == nil {
		return 1
	}
	return t.scaler.scale
}

// StepCount is the number of updates made.
func (t *Trainer) StepCount() int { return t.Opt.StepCount() }

// LR returns the learning rate the next step will use.
func (t *Trainer) LR() float64 {
	if t.lrSet != nil {
		return *t.lrSet
	}
	return t.sched.At(t.StepCount())
}

// SetLR fixes the learning rate for the following steps, overriding the
// schedule; a negative value returns to the schedule.
func (t *Trainer) SetLR(lr float64) {
	if lr < 0 {
		t.lrSet = nil
		return
	}
	t.lrSet = &lr
}

// Extend makes a WSD run's schedule end at step total instead of at
// Config.Steps, when total is later: Config.Steps becomes total, the
// plateau goes on at LR past the old end, and the 1−√ cool-down (Cooldown
// of the new length) ends at total. A run whose cool-down had finished
// returns to LR. Cosine and constant schedules are left as they are (a
// cosine's earlier rates depend on its length; a constant one has no
// end). It reports whether the schedule changed. RunWith calls it with
// the step the call will reach, so asking a WSD run for more steps than
// its config has extends it.
func (t *Trainer) Extend(total int) bool {
	if t.Config.Schedule != "wsd" || total <= t.Config.Steps {
		return false
	}
	t.Config.Steps = total
	t.sched = t.Config.LRSchedule()
	return true
}

// Step runs one optimizer update: GradAccum micro-batches of forward and
// backward (each loss divided by GradAccum), global-norm clipping, the
// optimizer (AdamW or Muon). A non-finite gradient norm skips the update
// (the record says so). The clip is folded into the optimizer on the
// device, so the gradients are left as the backward wrote them
// (unclipped; with float16, still times the loss scale), and nothing is
// read back until the end: on Metal a step is one command buffer (one
// per micro-batch) and one wait.
func (t *Trainer) Step() Metrics {
	// With precision float16 the backward starts from the loss times the
	// loss scale (see lossScaler); the clip divides it out of the norm and
	// of the update's coefficient, so no pass unscales the gradients.
	start := time.Now()
	cfg := t.Config
	lr := t.LR()
	t.Opt.SetLR(lr)
	// The last step's gradients: their memory is free for this step's.
	for _, p := range t.params {
		p.ReleaseGrad()
	}
	mem := ledger{dev: forge.DefaultDevice()}
	if len(t.params) > 0 {
		mem.dev = t.params[0].Device()
	}
	mem.dev.ResetPeak()
	t.Model.SetTraining(true)
	B, T := cfg.Batch, cfg.Model.Context
	scale := t.LossScale()
	losses := make([]*forge.Tensor, 0, cfg.GradAccum)
	var router routerAcc
	for i := range cfg.GradAccum {
		x, y := t.Train.Next()
		// Everything the micro-batch allocates but its loss and the
		// gradients is dead when its backward is queued: free it then,
		// not when the garbage collector gets to it.
		forge.Collect(func() {
			l := t.Model.Loss(forge.FromSlice(x, B, T), forge.FromSlice(y, B, T))
			router.add(t.Model.RouterStats()) // on the host already: no sync
			mem.phase(&mem.m.ForwardPeak, &mem.m.ForwardLive)
			// The upstream gradient: what the backward of
			// l.MulScalar(1/GradAccum) would pass (times the loss scale
			// with float16; LossScale is 1 otherwise).
			l.Backward(forge.FullLike(l, scale/float64(cfg.GradAccum)))
			mem.phase(&mem.m.BackwardPeak, &mem.m.BackwardLive)
			forge.NoGrad(func() {
				if cfg.GradAccum > 1 {
					l = l.MulScalar(1 / float64(cfg.GradAccum))
				}
				l = l.Detach()
				forge.Keep(l)
				losses = append(losses, l)
			})
		})
		if i < cfg.GradAccum-1 {
			losses[i].Device().Flush() // start the device on this micro-batch
		}
	}
	mem.dev.ResetPeak() // the micro-batch's end freed its activations
	clip := optim.ClipGradNormDeferredScaled(t.params, cfg.GradClip, scale)
	t.Opt.StepClipped(clip)
	// Pruned weights stay zero: AdamW's moments and weight decay would
	// otherwise move them (the forward multiplies by the mask anyway).
	nn.ApplyMasks(t.Model.Linears())
	mem.phase(&mem.m.OptimizerPeak, &mem.m.OptimizerLive)
	// The one wait: the first read finishes the queue.
	loss := 0.0
	for _, l := range losses {
		loss += l.Item()
	}
	norm, skipped := clip.Norm(), clip.Skipped()
	// The step's graph is dead now: hand its buffers back to the pool
	// before the next step allocates.
	if len(losses) > 0 {
		losses[0].Device().Recycle()
	}
	n := int64(B * T * cfg.GradAccum)
	t.tokens += n
	el := time.Since(start)
	m := Metrics{
		Step: t.StepCount(), Loss: loss, LR: lr, GradNorm: norm,
		TokensPerSec: float64(n) / el.Seconds(), StepMS: float64(el.Microseconds()) / 1e3,
		Tokens: t.tokens, Skipped: skipped, Time: time.Now().UTC().Format(time.RFC3339),
		Memory: mem.result(), Router: router.result(),
	}
	if t.scaler != nil {
		m.LossScale = scale
		t.scaler.update(skipped)
	}
	t.History.Steps = append(t.History.Steps, m)
	return m
}

// Eval returns the mean loss over the validation batches, with dropout
// off and no graph recorded.
func (t *Trainer) Eval() (float64, error) {
	if t.Val == nil {
		return 0, errors.New("train: no validation data")
	}
	xs, ys := t.Val()
	return Evaluate(t.Model, t.Config.Model.Context, xs, ys)
}

// Evaluate returns m's mean loss over batches of windows of context tokens
// (xs[i] and ys[i] hold whole windows), with dropout off and no graph
// recorded. It needs no optimizer: `forge eval` uses it on a loaded model.
func Evaluate(m *gpt.Model, context int, xs, ys [][]int32) (float64, error) {
	if len(xs) == 0 {
		return 0, errors.New("train: the validation set is smaller than one batch")
	}
	was := m.Training()
	m.SetTraining(false)
	defer m.SetTraining(was)
	sum := 0.0
	err := forge.Try(func() {
		forge.NoGrad(func() {
			for i := range xs {
				b := len(xs[i]) / context
				forge.Collect(func() {
					sum += m.Loss(forge.FromSlice(xs[i], b, context), forge.FromSlice(ys[i], b, context)).Item()
				})
			}
		})
	})
	if err != nil {
		return 0, err
	}
	return sum / float64(len(xs)), nil
}

// Callback sees each step's record; returning ErrStop ends Run early
// without an error, any other error ends it with that error.
type Callback func(m Metrics) error

// ErrStop stops Run from a callback.
var ErrStop = errors.New("train: stop")

// Run does n steps (or until ctx is cancelled, checked between steps),
// computing a validation loss every Config.EvalEvery steps and on the
// last, and calls the callbacks after each step. It returns the number of
// steps done. After Config.MaxNonFinite steps in a row with a non-finite
// loss or gradient norm it stops with an error wrapping ErrDiverged.
func (t *Trainer) Run(ctx context.Context, n int, cbs ...Callback) (int, error) {
	return t.RunWith(ctx, n, RunOptions{}, cbs...)
}

// RunOptions adjust one RunWith or Session.TrainWith call.
type RunOptions struct {
	// NoEval computes no validation loss in this call, whatever
	// Config.EvalEvery says (small moves, such as the REPL's :step, and
	// profiling a step; Eval computes one on demand).
	NoEval bool
	// Tripwire turns the NaN tripwire on for this call, as
	// Config.Tripwire does for every call.
	Tripwire bool
}

// RunWith is Run with options.
func (t *Trainer) RunWith(ctx context.Context, n int, opts RunOptions, cbs ...Callback) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	t.Extend(t.StepCount() + n)
	if (opts.Tripwire || t.Config.Tripwire) && !forge.TripwireOn() {
		forge.SetTripwire(true)
		defer forge.SetTripwire(false)
	}
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return i, nil
		}
		var m Metrics
		undo := t.snapshotInputs()
		if err := forge.Try(func() { m = t.Step() }); err != nil {
			return i, t.tripped(err, undo)
		}
		if t.Val != nil && !opts.NoEval && ((t.Config.EvalEvery > 0 && m.Step%t.Config.EvalEvery == 0) || (i == n-1 && t.Config.EvalEvery > 0)) {
			v, err := t.Eval()
			if err != nil {
				return i + 1, err
			}
			m.ValLoss = &v
			t.History.Steps[len(t.History.Steps)-1] = m
		}
		for _, cb := range cbs {
			if err := cb(m); err != nil {
				if errors.Is(err, ErrStop) {
					return i + 1, nil
				}
				return i + 1, err
			}
		}
		if err := t.checkFinite(m); err != nil {
			return i + 1, err
		}
	}
	return n, nil
}

// ErrDiverged is wrapped by the error Run returns when MaxNonFinite steps
// in a row had a non-finite loss or gradient norm.
var ErrDiverged = errors.New("training diverged")

// TripwireError is a step stopped by the NaN tripwire (Config.Tripwire)
// before its update: the weights, the optimizer, the step count and the
// position in the training data are those before the step.
type TripwireError struct {
	Step int         // the step that was not applied
	Trip *forge.Trip // the op that made the first non-finite value
}

func (e *TripwireError) Error() string {
	return fmt.Sprintf("train: tripwire at step %d: %s; the step was not applied (the weights are those of step %d)", e.Step, e.Trip, e.Step-1)
}

// snapshotInputs returns what puts back, with the tripwire on, the
// position in the training data and the dropout generator that a step
// stopped by it advanced (nil with the tripwire off).
func (t *Trainer) snapshotInputs() func() {
	if !forge.TripwireOn() {
		return nil
	}
	var undo []func()
	if l, ok := t.Train.(interface {
		State() data.LoaderState
		SetState(data.LoaderState) error
	}); ok {
		st := l.State()
		undo = append(undo, func() { _ = l.SetState(st) })
	}
	if g := t.Model.DropoutGenerator(); g != nil {
		st := g.State()
		undo = append(undo, func() { g.SetState(st) })
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// tripped turns an error of the NaN tripwire into a *TripwireError,
// undoing what the stopped step advanced; other errors pass unchanged.
func (t *Trainer) tripped(err error, undo func()) error {
	var fe *forge.Error
	if !errors.As(err, &fe) || fe.Trip == nil {
		return err
	}
	if undo != nil {
		undo()
	}
	return &TripwireError{Step: t.StepCount() + 1, Trip: fe.Trip}
}

// checkFinite counts the steps in a row whose loss or gradient norm is not
// finite and stops the run when there are Config.MaxNonFinite of them,
// naming the step, the loss and the first parameter whose gradient is
// not finite.
func (t *Trainer) checkFinite(m Metrics) error {
	bad := math.IsNaN(m.Loss) || math.IsInf(m.Loss, 0) || t.scaler == nil && m.Skipped
	if !bad {
		t.nonFinite = 0
		return nil
	}
	t.nonFinite++
	limit := t.Config.MaxNonFinite
	if limit == 0 {
		limit = DefaultMaxNonFinite
	}
	if t.nonFinite < limit {
		return nil
	}
	first := "none: the loss itself"
	if names := t.nonFiniteGrads(); len(names) > 0 {
		first = names[0]
		if len(names) > 1 {
			first += fmt.Sprintf(" and %d more", len(names)-1)
		}
	}
	return fmt.Errorf("train: %w at step %d: %d steps in a row had a non-finite loss or gradient norm (loss %v, grad norm %v; first non-finite gradient: %s), so none of them updated the weights; lower the learning rate (now %.3g) and resume from the last checkpoint",
		ErrDiverged, m.Step, t.nonFinite, m.Loss, m.GradNorm, first, m.LR)
}

// nonFiniteGrads lists, in the model's order, the parameters whose
// gradient holds a NaN or an infinity.
func (t *Trainer) nonFiniteGrads() []string {
	return nonFinite(t.Model.Params(), (*forge.Tensor).Grad)
}

// NonFiniteParams lists, in the model's order, the parameters that hold a
// NaN or an infinity: a checkpoint of such weights is refused.
func NonFiniteParams(m *gpt.Model) []string {
	return nonFinite(m.Params(), func(x *forge.Tensor) *forge.Tensor { return x })
}

// nonFinite lists the parameters whose tensor of(p) holds a NaN or an
// infinity (nil tensors skipped). Σ 0·x is 0 exactly for finite values
// however large, and NaN if any is not; the sums of all of them are added
// on the device and read once, so the common case (all finite) costs one
// read — one wait on Metal — and only a non-finite total reads each.
func nonFinite(ps []nn.Param, of func(*forge.Tensor) *forge.Tensor) []string {
	var xs []*forge.Tensor
	var names []string
	for _, p := range ps {
		if x := of(p.Tensor); x != nil {
			xs, names = append(xs, x), append(names, p.Name)
		}
	}
	if len(xs) == 0 {
		return nil
	}
	var out []string
	forge.NoGrad(func() {
		zs := make([]*forge.Tensor, len(xs))
		total := xs[0].MulScalar(0).Sum()
		zs[0] = total
		for i, x := range xs[1:] {
			zs[i+1] = x.MulScalar(0).Sum()
			total = total.Add(zs[i+1])
		}
		if total.Item() == 0 {
			return
		}
		for i, z := range zs {
			if z.Item() != 0 {
				out = append(out, names[i])
			}
		}
	})
	return out
}
