package forge

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/forgeml/forge/forge/backend"
)

// Phase is the part of a training step a kernel belongs to.
type Phase uint8

const (
	PhaseForward   Phase = iota // ops called by the user
	PhaseBackward               // ops run by Backward
	PhaseOptimizer              // ops run inside WithPhase(PhaseOptimizer, …)
)

func (p Phase) String() string {
	switch p {
	case PhaseForward:
		return "forward"
	case PhaseBackward:
		return "backward"
	case PhaseOptimizer:
		return "optimizer"
	}
	return "phase?"
}

var phase = PhaseForward

// CurrentPhase returns the phase kernels are attributed to now.
func CurrentPhase() Phase { return phase }

// WithPhase runs fn with kernels attributed to p (the optimizer uses
// PhaseOptimizer), restoring the previous phase afterwards.
func WithPhase(p Phase, fn func()) {
	prev := phase
	phase = p
	defer func() { phase = prev }()
	fn()
}

// Independent runs fn, whose kernels are independent of one another, so
// that a device may run them at the same time: on Metal, in one
// concurrent-dispatch region of the command buffer instead of one after
// the other (the optimizer's per-parameter updates, and the per-gradient
// sums of squares of a clip, are such kernels). It is a hint that never
// changes a result: the backend still orders a kernel after an earlier
// one of fn whose memory it reads or writes, where either writes. Like
// the phase, it is process-wide: call the ops from the goroutine that
// called Independent. Calls nest; the outermost ends the region.
func Independent(fn func()) {
	indep.depth++
	defer func() {
		indep.depth--
		if indep.depth == 0 {
			devs := indep.devs
			indep.devs = nil
			for _, d := range devs {
				d.b.Concurrent(false)
			}
		}
	}()
	fn()
}

// indep is the state of Independent: how deep the calls are, and the
// devices told so far that their kernels are independent.
var indep independence

type independence struct {
	depth int
	devs  []*Device
}

// join tells d's backend, at d's first kernel inside Independent, that
// the kernels are independent.
func (s *independence) join(d *Device) {
	for _, x := range s.devs {
		if x == d {
			return
		}
	}
	s.devs = append(s.devs, d)
	d.b.Concurrent(true)
}

// Scope runs fn with name pushed onto the scope path: kernels launched in
// fn are reported with the enclosing scopes' names joined by "/"
// ("blocks.2/attn"), and the scope itself is reported to the observer
// when fn returns (or panics). gpt.Model marks each transformer block
// ("blocks.N") this way.
//
// Scopes label the kernels that run inside fn, the forward pass: the
// backward kernels of those layers run later, inside Backward, and carry
// no scope. Like the phase, the path is process-wide: mark scopes from the
// goroutine that launches the kernels. Without an observer Scope only
// calls fn; the path is not built.
func Scope(name string, fn func()) {
	obs := observer.Load()
	if obs == nil && !tripwire {
		fn()
		return
	}
	enterScope(obs, name, fn)
}

// ScopeIndexed is Scope with the name prefix + "." + i ("blocks.3"), built
// only while an observer listens, so a model's loop over its layers pays
// nothing otherwise.
func ScopeIndexed(prefix string, i int, fn func()) {
	obs := observer.Load()
	if obs == nil && !tripwire {
		fn()
		return
	}
	enterScope(obs, prefix+"."+strconv.Itoa(i), fn)
}

// scopePath is the path of the scopes entered while an observer listened
// (nil: none).
var scopePath atomic.Pointer[string]

func enterScope(obs *Observer, name string, fn func()) {
	prev := scopePath.Load()
	path := name
	if prev != nil {
		path = *prev + "/" + name
	}
	scopePath.Store(&path)
	start := time.Now()
	defer func() {
		d := time.Since(start)
		scopePath.Store(prev)
		if obs != nil && obs.Scope != nil {
			obs.Scope(ScopeSpan{Path: path, Start: start, Duration: d})
		}
	}()
	fn()
}

// currentScope is the scope path in effect ("" outside every scope).
func currentScope() string {
	if p := scopePath.Load(); p != nil {
		return *p
	}
	return ""
}

// KernelCall describes one kernel launch, as reported to an Observer.
// Duration is the wall time of the call, or on a device with its own clock the
// device time of the kernels it ran.
type KernelCall struct {
	Kernel   string    // kernel name, e.g. "matmul", "unary.exp", "attention.backward"
	Variant  string    // the path that ran where the backend has several, e.g. "openblas"
	Device   string    // backend name
	DType    DType     // dtype of the first operand
	Shapes   [][]int   // operand shapes, inputs first, then outputs
	Phase    Phase     // forward, backward or optimizer
	Scope    string    // the Scope path it was launched in, e.g. "blocks.3/attn" ("" outside every Scope)
	FLOPs    int64     // floating-point operations the kernel performs
	Bytes    int64     // bytes it reads and writes at least once
	Start    time.Time // when the call began (host clock)
	Duration time.Duration
}

// ScopeSpan describes one Scope, as reported to an Observer when it ends.
type ScopeSpan struct {
	Path     string        // the full path, e.g. "blocks.3/attn"
	Start    time.Time     // when fn began (host clock)
	Duration time.Duration // wall time of fn
}

// Observer receives what the dispatch point sees while it is installed:
// Kernel every kernel call after it completes, Scope every Scope as it
// ends, Tensors every kernel call after Kernel with the tensors it read
// (in) and wrote (out). Any may be nil.
//
// Tensors is for checks that compare values kernel by kernel (forge
// doctor's shadow parity): it may read the tensors (reading waits for the
// kernel) and write the outputs in place (CopyFrom inside NoGrad), but
// must not keep them: they are valid during the call only (Backward and
// Collect may free a kernel's operands right after it). The kernels it
// launches itself are reported to it too.
type Observer struct {
	Kernel  func(KernelCall)
	Scope   func(ScopeSpan)
	Tensors func(c KernelCall, in, out []*Tensor)
}

var observer atomic.Pointer[Observer]

// SetObserver installs obs (the zero Observer removes it) and returns the
// previous one. An observer installed over another should pass on what it
// receives to the previous one (chaining) and reinstall it when done.
//
// While an observer is installed, every kernel is timed (on the CPU, wall
// time of the call; on a device with its own clock (Metal:
// Backend.TimeKernels), device time,
// with each kernel submitted and waited for on its own, so batching is off
// while profiling) and reported after it completes.
func SetObserver(obs Observer) Observer {
	var p *Observer
	if obs.Kernel != nil || obs.Scope != nil || obs.Tensors != nil {
		p = &obs
	}
	old := observer.Swap(p)
	if old == nil {
		return Observer{}
	}
	return *old
}

// kcall is what an op knows about a kernel before launching it.
type kcall struct {
	in, out operands // the tensors it reads and writes (for Observer.Tensors)
	name    string
	dt      DType
	shapes  [][]int
	flops   int64
	bytes   int64
}

// launch is the single dispatch point: every kernel call in the package goes
// through it. Without an observer it only calls fn.
//
// fn's closure holds the tensors the kernel reads and writes; it is kept
// alive until the kernel returns, so no buffer becomes unreachable (and,
// on the CPU, recycled) while a kernel still uses it.
func launch(d *Device, k kcall, fn func(b backend.Backend)) {
	checkWritable(k.name, k.out)
	if indep.depth != 0 {
		indep.join(d)
	}
	obs := observer.Load()
	if obs == nil {
		fn(d.b)
		runtime.KeepAlive(fn)
		if tripwire {
			tripCheck(k)
		}
		return
	}
	// A GPU queues kernels: TimeKernels finishes what is queued, then
	// times this call's kernels on the device, one at a time; a backend
	// without a clock of its own runs them and reports no time, and the
	// call's wall time is its time.
	start := time.Now()
	dur, timed := d.b.TimeKernels(func() { fn(d.b) })
	if !timed {
		dur = time.Since(start)
	}
	runtime.KeepAlive(fn)
	// Asked after the call: a backend may pick the path per call (the
	// CPU's matmul does, by shape).
	variant := d.b.Variant(k.name)
	c := KernelCall{
		Kernel: k.name, Variant: variant, Device: d.name, DType: k.dt, Shapes: k.shapes,
		Phase: phase, Scope: currentScope(), FLOPs: k.flops, Bytes: k.bytes, Start: start, Duration: dur,
	}
	if obs.Kernel != nil {
		obs.Kernel(c)
	}
	if obs.Tensors != nil {
		in, out := k.in, k.out
		obs.Tensors(c, in.t[:in.n], out.t[:out.n])
	}
	if tripwire {
		tripCheck(k)
	}
}

// operands are the tensors a kernel reads or writes, for Observer.Tensors:
// a value, so that listing them allocates nothing at the many launches no
// observer hears.
type operands struct {
	t [6]*Tensor
	n int
}

// tensors lists the operands of a kernel, leaving out the optional ones
// that are nil.
func tensors(ts ...*Tensor) operands {
	var o operands
	for _, t := range ts {
		if t != nil {
			if o.n == len(o.t) {
				panic(errorf("launch", "internal: a kernel with more than %d operands", len(o.t)))
			}
			o.t[o.n] = t
			o.n++
		}
	}
	return o
}

// shapesOf lists the shapes of ts for a kernel record.
func shapesOf(ts ...*Tensor) [][]int {
	s := make([][]int, len(ts))
	for i, t := range ts {
		s[i] = t.shape
	}
	return s
}

// bytesOf is the total size in bytes of ts.
func bytesOf(ts ...*Tensor) int64 {
	var n int64
	for _, t := range ts {
		n += int64(t.Numel() * t.dtype.Size())
	}
	return n
}
