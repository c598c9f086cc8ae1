package profile

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

// BenchOptions control Bench. The zero value is a one-second budget.
type BenchOptions struct {
	// Budget is the time to spend timing, warm-up included (default 1 s).
	// At least MinRuns runs are made even if they take longer.
	Budget time.Duration
	// MinRuns is the fewest timed runs (default 3).
	MinRuns int
	// Loops is the calls per run; 0 picks it so a run lasts about a
	// twentieth of the budget.
	Loops int
	// Sync, if set, is called at the end of each run and of the warm-up
	// (a GPU's sync, so queued work is inside the timing).
	Sync func()
}

// BenchResult is the timing of one function, %timeit style: Runs holds
// the time per call of each run (a run is Loops back-to-back calls).
type BenchResult struct {
	Runs   []time.Duration `json:"runs_ns"` // per call, one per run
	Loops  int             `json:"loops"`   // calls per run
	Warmup int             `json:"warmup"`  // untimed calls before the runs
	Min    time.Duration   `json:"min_ns"`
	Median time.Duration   `json:"median_ns"`
	Max    time.Duration   `json:"max_ns"`
	Mean   time.Duration   `json:"mean_ns"`
	Std    time.Duration   `json:"std_ns"` // standard deviation of the runs
	// Busy is the share of the CPUs' time other processes used during the
	// benchmark (-1: unknown, not Linux); above 10 % the figures are
	// unreliable and String says so.
	Busy float64 `json:"busy"`
}

// String is the %timeit line: "12.3 ms ± 0.41 ms per loop (median ± std.
// dev. of 21 runs, 4 loops each; min 12.0 ms, max 13.9 ms)".
func (r BenchResult) String() string {
	loops := "loops"
	if r.Loops == 1 {
		loops = "loop"
	}
	s := fmt.Sprintf("%s ± %s per loop (median ± std. dev. of %d runs, %d %s each; min %s, max %s)",
		fmtDur(r.Median), fmtDur(r.Std), len(r.Runs), r.Loops, loops, fmtDur(r.Min), fmtDur(r.Max))
	if r.Busy > busyLimit {
		s += fmt.Sprintf("\n  warning: other processes used %.0f %% of the CPUs meanwhile; the figures are unreliable", 100*r.Busy)
	}
	return s
}

// Bench times fn: it warms fn up (at least one call and a tenth of the
// budget), then makes runs of opts.Loops calls until the budget is spent,
// and reports the time per call of each run with their minimum, median
// and maximum.
func Bench(fn func(), opts BenchOptions) BenchResult {
	budget := opts.Budget
	if budget <= 0 {
		budget = time.Second
	}
	minRuns := opts.MinRuns
	if minRuns <= 0 {
		minRuns = 3
	}
	sync := opts.Sync
	if sync == nil {
		sync = func() {}
	}
	var res BenchResult
	load := watchLoad()
	begin := time.Now()
	// Warm-up: caches, thread pools, page faults, lazy initialisation.
	fastest := time.Duration(math.MaxInt64)
	for res.Warmup == 0 || time.Since(begin) < budget/10 {
		t0 := time.Now()
		fn()
		sync()
		fastest = min(fastest, time.Since(t0))
		res.Warmup++
	}
	res.Loops = opts.Loops
	if res.Loops <= 0 {
		res.Loops = max(1, int(budget/20/max(fastest, time.Nanosecond)))
	}
	for len(res.Runs) < minRuns || (time.Since(begin) < budget && len(res.Runs) < 100000) {
		t0 := time.Now()
		for range res.Loops {
			fn()
		}
		sync()
		res.Runs = append(res.Runs, time.Since(t0)/time.Duration(res.Loops))
	}
	res.summarise()
	res.Busy = load()
	return res
}

// summarise fills Min, Median, Max, Mean and Std from Runs.
func (r *BenchResult) summarise() {
	if len(r.Runs) == 0 {
		return
	}
	s := slices.Clone(r.Runs)
	slices.Sort(s)
	r.Min, r.Max = s[0], s[len(s)-1]
	if n := len(s); n%2 == 1 {
		r.Median = s[n/2]
	} else {
		r.Median = (s[n/2-1] + s[n/2]) / 2
	}
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	mean := sum / float64(len(s))
	var ss float64
	for _, d := range s {
		ss += (float64(d) - mean) * (float64(d) - mean)
	}
	r.Mean = time.Duration(mean)
	if len(s) > 1 {
		r.Std = time.Duration(math.Sqrt(ss / float64(len(s)-1)))
	}
}

// KernelResult is the benchmark of one kernel on one shape.
type KernelResult struct {
	Kernel  string `json:"kernel"`  // as asked, e.g. "matmul", "attention+backward"
	Shape   string `json:"shape"`   // e.g. "1024×1024×1024", "B16 T128 H4 D32 causal"
	Dims    []int  `json:"dims"`    // the sizes given
	Device  string `json:"device"`  // backend name
	Variant string `json:"variant"` // the code path that ran, e.g. "openblas"
	DType   string `json:"dtype"`
	FLOPs   int64  `json:"flops"` // per call
	Bytes   int64  `json:"bytes"` // per call: each input read and each output written once
	Unit    string `json:"unit"`  // "GFLOP/s" for compute kernels, "GB/s" for memory-bound ones
	BenchResult
	GFLOPS float64 `json:"gflops"` // at the median time
	GBps   float64 `json:"gbps"`   // at the median time
}

// Rate is the figure in Unit at the median time.
func (k KernelResult) Rate() float64 {
	if k.Unit == "GB/s" {
		return k.GBps
	}
	return k.GFLOPS
}

// String is "matmul 1024×1024×1024 float32 on cpu (openblas): 191.2
// GFLOP/s" followed by the %timeit line.
func (k KernelResult) String() string {
	path := k.Device
	if k.Variant != "" {
		path += " (" + k.Variant + ")"
	}
	return fmt.Sprintf("%s %s %s on %s: %.1f %s\n  %s", k.Kernel, k.Shape, k.DType, path, k.Rate(), k.Unit, k.BenchResult)
}

// Kernels lists the names BenchKernel knows with the sizes each takes and
// their defaults.
var Kernels = []struct{ Name, Dims, Defaults string }{
	{"matmul", "M N K", "1024 1024 1024"},
	{"attention", "B T H D (causal, forward)", "16 128 4 32"},
	{"attention+backward", "B T H D (causal, forward and backward)", "16 128 4 32"},
	{"softmax", "N C (rows of C)", "2048 128"},
	{"rmsnorm", "N C", "2048 128"},
	{"cross_entropy", "N V (N rows of V logits)", "2048 512"},
	{"copy", "N (float32 elements)", "16777216"},
}

// BenchKernel times one kernel of the default device on float32 operands
// of the given sizes (see Kernels; no sizes: the defaults), through the
// forge op that launches it (a.MatMul(b), forge.Attention, …, with the
// output it allocates), with a one-second budget. A training step is
// train.BenchStep.
//
// The result's FLOPs, Bytes and Variant are what forge's dispatch point
// reports for one call of the op: the sum over the kernels it launched
// (attention+backward also copies the three gradients into q, k and v;
// cross_entropy also averages the rows' losses), and the path the named
// kernel took.
//
//	r, err := profile.BenchKernel("matmul", 1024, 1024, 1024)
//	fmt.Println(r) // matmul 1024×1024×1024 float32 on cpu (openblas): 190.4 GFLOP/s …
func BenchKernel(name string, dims ...int) (KernelResult, error) {
	return BenchKernelOpts(BenchOptions{}, name, dims...)
}

// BenchKernelOpts is BenchKernel with options.
func BenchKernelOpts(opts BenchOptions, name string, dims ...int) (res KernelResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(backend.ErrNotImplemented); ok {
				err = fmt.Errorf("profile: %w", e)
				return
			}
			panic(p)
		}
	}()
	dev := forge.DefaultDevice()
	k, err := newKernelBench(dev, name, dims)
	if err != nil {
		return res, err
	}
	if opts.Sync == nil {
		opts.Sync = dev.Sync
	}
	res = k.result
	res.BenchResult = Bench(k.call, opts)
	if s := res.Median.Seconds(); s > 0 {
		res.GFLOPS = float64(res.FLOPs) / s / 1e9
		res.GBps = float64(res.Bytes) / s / 1e9
	}
	return res, nil
}

// kernelBench holds one prepared call of a forge op.
type kernelBench struct {
	call   func()
	result KernelResult
}

// newKernelBench prepares the operands of the benchmark name on dev and
// makes one recorded call of its op, which fills the result's FLOPs, Bytes
// and Variant from the dispatch point's records.
func newKernelBench(dev *forge.Device, name string, dims []int) (*kernelBench, error) {
	var want int
	var defaults string
	for _, k := range Kernels {
		if k.Name == name {
			want = len(strings.Fields(k.Defaults))
			defaults = k.Defaults
		}
	}
	if want == 0 {
		if name == "step" {
			return nil, ArgError{"a training step is timed by train.BenchStep (forge bench step)"}
		}
		names := make([]string, len(Kernels))
		for i, k := range Kernels {
			names[i] = k.Name
		}
		return nil, ArgError{fmt.Sprintf("no kernel benchmark %q (have %s)", name, strings.Join(names, ", "))}
	}
	if len(dims) == 0 {
		for _, f := range strings.Fields(defaults) {
			var v int
			fmt.Sscan(f, &v)
			dims = append(dims, v)
		}
	}
	if len(dims) != want {
		return nil, ArgError{fmt.Sprintf("%s takes %d sizes (%s), got %d", name, want, dimsOf(name), len(dims))}
	}
	for _, d := range dims {
		if d <= 0 {
			return nil, ArgError{fmt.Sprintf("%s sizes must be positive, got %v", name, dims)}
		}
	}
	if gb := footprint(name, dims) / (1 << 30); gb > maxBenchGiB {
		return nil, ArgError{fmt.Sprintf("%s %v would need %.1f GiB of operands (at most %d)", name, dims, gb, maxBenchGiB)}
	}
	kb := &kernelBench{result: KernelResult{
		Kernel: name, Dims: slices.Clone(dims), Device: dev.Name(), DType: "float32", Unit: "GB/s",
	}}
	g := forge.NewGenerator(1)
	randn := func(shape ...int) *forge.Tensor { return g.Randn(forge.Float32, shape...).To(dev) }
	res := &kb.result
	kernel := name // forge's name of the kernel whose path the result names
	switch name {
	case "matmul":
		m, n, k := dims[0], dims[1], dims[2]
		a, b := randn(m, k), randn(k, n)
		res.Shape = fmt.Sprintf("%d×%d×%d", m, n, k)
		res.Unit = "GFLOP/s"
		kb.call = func() { a.MatMul(b) }
	case "attention", "attention+backward":
		B, T, H, D := dims[0], dims[1], dims[2], dims[3]
		q, k, v := randn(B, H, T, D), randn(B, H, T, D), randn(B, H, T, D)
		res.Shape = fmt.Sprintf("B%d T%d H%d D%d causal", B, T, H, D)
		res.Unit, kernel = "GFLOP/s", "attention"
		kb.call = func() { forge.NoGrad(func() { forge.Attention(q, k, v, true) }) }
		if name == "attention+backward" {
			gr := randn(B, H, T, D)
			for _, x := range []*forge.Tensor{q, k, v} {
				x.RequiresGrad()
			}
			kb.call = func() {
				q.ZeroGrad()
				k.ZeroGrad()
				v.ZeroGrad()
				forge.Attention(q, k, v, true).Backward(gr)
			}
		}
	case "softmax":
		n, c := dims[0], dims[1]
		x := randn(n, c)
		res.Shape = fmt.Sprintf("(%d, %d)", n, c)
		kb.call = func() { x.Softmax(-1) }
	case "rmsnorm":
		n, c := dims[0], dims[1]
		x, w := randn(n, c), randn(c)
		res.Shape = fmt.Sprintf("(%d, %d)", n, c)
		kernel = "rms_norm"
		kb.call = func() { forge.RMSNorm(x, w, 1e-6) }
	case "cross_entropy":
		n, vocab := dims[0], dims[1]
		logits, targets := randn(n, vocab), g.RandInt(0, vocab, n).To(dev)
		res.Shape = fmt.Sprintf("(%d, %d)", n, vocab)
		kb.call = func() { forge.CrossEntropy(logits, targets, -1) }
	case "copy":
		n := dims[0]
		src, dst := randn(n), forge.Zeros(n).To(dev)
		res.Shape = fmt.Sprintf("%d float32 (%s)", n, fmtBytes(int64(n)*4))
		kb.call = func() { dst.CopyFrom(src) }
	}
	// One recorded call: the work and the path as the dispatch point
	// reports them (the path may depend on the shape: name the one this
	// call takes).
	for _, r := range Run(func() { kb.call(); dev.Sync() }).Records {
		res.FLOPs += r.FLOPs
		res.Bytes += r.Bytes
		if r.Kernel == kernel && res.Variant == "" {
			res.Variant = r.Variant
		}
	}
	return kb, nil
}

// maxBenchGiB bounds the operands of a kernel benchmark, so a typo in a
// size is an error rather than an out-of-memory crash.
const maxBenchGiB = 8

// footprint is the bytes of float32 operands a kernel benchmark allocates
// (computed in float64: absurd sizes must not overflow).
func footprint(name string, dims []int) float64 {
	d := make([]float64, len(dims))
	for i, v := range dims {
		d[i] = float64(v)
	}
	var elems float64
	switch name {
	case "matmul":
		elems = d[0]*d[2] + d[2]*d[1] + d[0]*d[1]
	case "attention":
		elems = 4*d[0]*d[1]*d[2]*d[3] + d[0]*d[1]*d[2]
	case "attention+backward":
		elems = 8*d[0]*d[1]*d[2]*d[3] + d[0]*d[1]*d[2]
	case "softmax", "rmsnorm", "cross_entropy":
		elems = 2*d[0]*d[1] + d[0] + d[1]
	case "copy":
		elems = 2 * d[0]
	}
	return 4 * elems
}

// ArgError reports a kernel benchmark asked for with a name or sizes it
// does not take.
type ArgError struct{ Msg string }

func (e ArgError) Error() string { return "profile: " + e.Msg }

func dimsOf(name string) string {
	for _, k := range Kernels {
		if k.Name == name {
			return k.Dims
		}
	}
	return ""
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// OnRoofline places the kernel at its median time against a device's
// peak, as a report row would be: bound is "compute" or "memory" ("" for a
// nil peak or another device's), attainable the roofline's GFLOP/s at the
// kernel's intensity, and pct the fraction of the roofline reached.
func (k KernelResult) OnRoofline(pk *Roofline) (bound string, attainable, pct float64) {
	row := Row{Device: k.Device}
	roofline(&row, &acc{calls: 1, total: k.Median, flops: k.FLOPs, bytes: k.Bytes}, pk)
	return row.Bound, row.Attainable, row.PctRoof
}
