package doctor

// Shadow parity: one training step of a small GPT on the device under test
// and on the CPU, from the same weights and batch, compared kernel by
// kernel. The device's step runs first with an observer that copies every
// kernel's outputs to the host; the CPU's step then runs with an observer
// that, after each kernel, compares the CPU's outputs with the device's
// (tolerance.go) and copies the device's values into the CPU's tensors, so
// that the next kernel on the CPU reads exactly what it read on the
// device. A difference beyond tolerance is therefore that kernel's own,
// and the first one is named with its scope and phase.
//
// Both runs must launch the same kernels in the same order: the CPU
// reference runs with the device's set of optional kernels (a fused kernel
// the device lacks is composed on the CPU too).

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/train"
)

// Shadow is the outcome of the shadow-parity step.
type Shadow struct {
	Config     string    // the model and batch, e.g. "tiny, batch 2 × context 32"
	Kernels    int       // kernel calls compared
	First      *Mismatch // the first kernel beyond its tolerance (nil: none)
	Beyond     int       // kernel outputs beyond tolerance in all
	Diverged   string    // why the comparison stopped early ("" if it did not)
	DeviceLoss float64
	CPULoss    float64 // of the CPU's step (fed the device's values kernel by kernel)
	// Worst is each kernel's largest |Δ|/tolerance over its calls (for
	// exact kernels, tolerance 0: 0 if equal, +Inf otherwise).
	Worst map[string]float64
}

// Mismatch is one kernel output beyond its tolerance.
type Mismatch struct {
	Index   int    // position in the step's kernel sequence (0-based)
	Kernel  string // e.g. "rmsnorm"
	Scope   string // e.g. "blocks.1" ("" outside every scope)
	Phase   forge.Phase
	Output  int   // which output of the kernel
	Shape   []int // its shape
	Element int   // the element where |Δ| − tolerance is largest
	Device  float64
	CPU     float64
	Diff    float64
	Tol     float64
	Rule    string // the tolerance rule (tolerance.go)
}

func (m *Mismatch) String() string {
	scope := m.Scope
	if scope == "" {
		scope = "-"
	}
	return fmt.Sprintf("kernel #%d %s (scope %s, %s), output %d %v element %d: device %.9g, cpu %.9g, |Δ| %.3g > tolerance %.3g (%s rule)",
		m.Index, m.Kernel, scope, m.Phase, m.Output, m.Shape, m.Element, m.Device, m.CPU, m.Diff, m.Tol, m.Rule)
}

// shadowConfig is the step: the tiny config at a small batch and context,
// so the step runs in seconds on the emulator, the learning rate constant.
func shadowConfig() (train.Config, string, error) {
	cfg, err := train.LoadConfig("tiny")
	if err != nil {
		return cfg, "", err
	}
	cfg.Batch, cfg.Model.Context, cfg.GradAccum = 2, 32, 1
	cfg.Warmup, cfg.Schedule, cfg.EvalEvery = 0, "constant", 0
	cfg.Seed = 1
	return cfg, fmt.Sprintf("%s (%d layers, d_model %d, vocab %d), batch %d × context %d",
		cfg.Name, cfg.Model.Layers, cfg.Model.Dim, cfg.Model.Vocab, cfg.Batch, cfg.Model.Context), nil
}

// fixedBatch serves one batch forever.
type fixedBatch struct{ x, y []int32 }

func (f fixedBatch) Next() (x, y []int32) { return f.x, f.y }

// record is one kernel call of the device's step.
type record struct {
	kernel, scope string
	phase         forge.Phase
	shapes        [][]int
	out           []operand
	dtypes        []forge.DType
}

// hostOf copies t to the host.
func hostOf(t *forge.Tensor) operand {
	return operand{shape: slices.Clone(t.Shape()), v: t.Float64s(), float: t.DType().IsFloat()}
}

// stepOn builds the model and trainer on dev (the default device meanwhile)
// and runs one step with obs installed, returning the loss.
//
// state carries the initial weights from the first run to the second:
// when *state is nil, stepOn stores the model's weights (host copies) in
// it; otherwise it copies them into the model before the step, so the CPU
// starts from the device's state to the bit (initialisation itself runs
// kernels, whose last bits may differ between devices).
func stepOn(dev *forge.Device, cfg train.Config, batch fixedBatch, state *[]operand, obs forge.Observer) (loss float64, err error) {
	prev := forge.DefaultDevice()
	forge.SetDefaultDevice(dev)
	defer forge.SetDefaultDevice(prev)
	err = forge.Try(func() {
		m, e := gpt.New(cfg.Model, cfg.Seed)
		if e != nil {
			panic(e)
		}
		params := m.Params()
		if *state == nil {
			for _, p := range params {
				*state = append(*state, hostOf(p.Tensor))
			}
		} else {
			forge.NoGrad(func() {
				for i, p := range params {
					o := (*state)[i]
					p.Tensor.CopyFrom(forge.FromSlice(o.v, max(1, len(o.v))).Reshape(o.shape...).To(dev).Cast(p.Tensor.DType()))
				}
			})
		}
		tr, e := train.NewTrainer(cfg, m, batch, nil)
		if e != nil {
			panic(e)
		}
		dev.Sync()
		old := forge.SetObserver(obs)
		defer forge.SetObserver(old)
		loss = tr.Step().Loss
		dev.Sync()
	})
	return loss, err
}

// cpuLike is a cpu backend that offers exactly the optional kernels the
// device under test offers, so that both launch the same kernels.
type cpuLike struct {
	backend.Backend
	caps backend.Capabilities
}

func (c cpuLike) Capabilities() backend.Capabilities { return c.caps }

var cpuLikeMu sync.Mutex

// referenceFor opens the CPU reference of dev: the cpu device itself, or
// a cpu device with dev's optional kernels ("cpu-as-<dev>").
func referenceFor(dev *forge.Device) (*forge.Device, error) {
	if dev.Name() == "cpu" {
		return forge.OpenDevice("cpu")
	}
	name := "cpu-as-" + dev.Name()
	cpuLikeMu.Lock()
	defer cpuLikeMu.Unlock()
	if !slices.Contains(backend.Names(), name) {
		want := dev.Capabilities()
		backend.Register(name, func() (backend.Backend, error) {
			b, err := backend.Open("cpu")
			if err != nil {
				return nil, err
			}
			caps := b.Capabilities().Without()
			for _, k := range backend.OptionalKernels {
				if d, ok := want[k]; ok && caps[k] != 0 {
					caps[k] &= d
				} else {
					delete(caps, k)
				}
			}
			return cpuLike{b, caps}, nil
		})
	}
	return forge.OpenDevice(name)
}

// runShadow runs the comparison (tamper: see Options.Tamper).
func runShadow(dev *forge.Device, tamper func(forge.KernelCall, []*forge.Tensor), progress func(string, ...any)) (*Shadow, error) {
	cfg, desc, err := shadowConfig()
	if err != nil {
		return nil, err
	}
	ref, err := referenceFor(dev)
	if err != nil {
		return nil, fmt.Errorf("the cpu reference does not open: %w", err)
	}
	B, T := cfg.Batch, cfg.Model.Context
	data := forge.NewGenerator(cfg.Seed+1).RandInt(0, cfg.Model.Vocab, B, T+1).Int32s()
	var batch fixedBatch
	for b := range B {
		row := data[b*(T+1) : (b+1)*(T+1)]
		batch.x, batch.y = append(batch.x, row[:T]...), append(batch.y, row[1:]...)
	}
	sh := &Shadow{Config: desc, Worst: map[string]float64{}}

	// The device's step: record every kernel's outputs.
	var recs []record
	busy := false
	start := time.Now()
	var state []operand
	sh.DeviceLoss, err = stepOn(dev, cfg, batch, &state, forge.Observer{Tensors: func(c forge.KernelCall, in, out []*forge.Tensor) {
		if busy {
			return // a kernel the observer itself launched (reading a view)
		}
		busy = true
		defer func() { busy = false }()
		if tamper != nil {
			tamper(c, out)
		}
		r := record{kernel: c.Kernel, scope: c.Scope, phase: c.Phase, shapes: c.Shapes}
		for _, t := range out {
			r.out = append(r.out, hostOf(t))
			r.dtypes = append(r.dtypes, t.DType())
		}
		recs = append(recs, r)
	}})
	if err != nil {
		return nil, fmt.Errorf("the step on %s failed: %w", dev.Name(), err)
	}
	progress("shadow parity: %d kernels of one step on %s recorded in %.1f s", len(recs), dev.Name(), time.Since(start).Seconds())

	// The CPU's step: compare, then feed the device's values forward.
	i := 0
	start = time.Now()
	sh.CPULoss, err = stepOn(ref, cfg, batch, &state, forge.Observer{Tensors: func(c forge.KernelCall, in, out []*forge.Tensor) {
		if busy || sh.Diverged != "" {
			return
		}
		busy = true
		defer func() { busy = false }()
		if i >= len(recs) {
			sh.Diverged = fmt.Sprintf("the cpu launched more kernels than %s's %d (kernel #%d %s)", dev.Name(), len(recs), i, c.Kernel)
			return
		}
		r := recs[i]
		if r.kernel != c.Kernel || len(r.out) != len(out) || !slices.EqualFunc(r.shapes, c.Shapes, slices.Equal) {
			sh.Diverged = fmt.Sprintf("kernel #%d: %s launched %s %v, the cpu %s %v", i, dev.Name(), r.kernel, r.shapes, c.Kernel, c.Shapes)
			return
		}
		ins := make([]operand, len(in))
		for k, t := range in {
			ins[k] = hostOf(t)
		}
		cpuOut := make([]operand, len(out))
		for j, t := range out {
			cpuOut[j] = hostOf(t)
		}
		for j := range out {
			d, cv := r.out[j], cpuOut[j]
			tol, rule := tolerances(c.Kernel, ins, cpuOut, j)
			worstExcess, worstRatio, at := math.Inf(-1), 0.0, -1
			for e := range cv.v {
				t := tol[min(e, len(tol)-1)]
				diff := math.Abs(d.v[e] - cv.v[e])
				if math.IsNaN(d.v[e]) != math.IsNaN(cv.v[e]) || (!math.IsNaN(diff) && diff > t) {
					if ex := diff - t; at < 0 || ex > worstExcess || math.IsNaN(diff) {
						worstExcess, at = ex, e
					}
				}
				switch {
				case diff == 0 || math.IsNaN(diff):
				case t == 0:
					worstRatio = math.Inf(1)
				default:
					worstRatio = math.Max(worstRatio, diff/t)
				}
			}
			sh.Worst[c.Kernel] = math.Max(sh.Worst[c.Kernel], worstRatio)
			if at >= 0 {
				sh.Beyond++
				if sh.First == nil {
					sh.First = &Mismatch{Index: i, Kernel: c.Kernel, Scope: r.scope, Phase: r.phase, Output: j,
						Shape: cv.shape, Element: at, Device: d.v[at], CPU: cv.v[at],
						Diff: math.Abs(d.v[at] - cv.v[at]), Tol: tol[min(at, len(tol)-1)], Rule: rule}
				}
			}
			// Feed the device's values to the CPU's next kernels.
			forge.NoGrad(func() {
				src := forge.FromSlice(d.v, max(1, len(d.v))).Reshape(d.shape...).To(ref).Cast(r.dtypes[j])
				out[j].CopyFrom(src)
			})
		}
		sh.Kernels++
		i++
	}})
	if err != nil {
		return nil, fmt.Errorf("the step on the cpu failed: %w", err)
	}
	if sh.Diverged == "" && i < len(recs) {
		sh.Diverged = fmt.Sprintf("the cpu launched %d kernels, %s %d", i, dev.Name(), len(recs))
	}
	progress("shadow parity: %d kernels compared on the cpu in %.1f s", sh.Kernels, time.Since(start).Seconds())
	return sh, nil
}

// shadow is the report section.
func (r *run) shadow() *Shadow {
	r.section("Shadow parity (one training step, device against the CPU, kernel by kernel)")
	sh, err := runShadow(r.dev, r.opts.Tamper, r.progress)
	if err != nil {
		r.fail("shadow parity could not run: %v", err)
		return nil
	}
	r.line("step: %s; the CPU is fed the device's outputs after each kernel, so each difference is that kernel's own", sh.Config)
	if r.dev.Name() == "cpu" {
		r.line("the device under test is the CPU: the comparison checks the harness (the CPU against itself)")
	}
	r.line("loss: device %.7f, cpu %.7f", sh.DeviceLoss, sh.CPULoss)
	r.line("%d kernel calls compared; largest |Δ|/tolerance per kernel (0: identical):", sh.Kernels)
	names := make([]string, 0, len(sh.Worst))
	for k := range sh.Worst {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		r.line("- %-24s %.2g", k, sh.Worst[k])
	}
	if sh.Diverged != "" {
		r.fail("shadow parity: the two steps launched different kernels: %s", sh.Diverged)
	}
	if sh.First != nil {
		r.fail("shadow parity: first kernel beyond tolerance: %s; %d output(s) beyond in all", sh.First, sh.Beyond)
	} else if sh.Diverged == "" {
		r.line("every kernel output within tolerance")
	}
	return sh
}
