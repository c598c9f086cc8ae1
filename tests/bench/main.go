// Command bench measures Forge's CPU kernels next to numpy in the same run
// and prints one table: matmul GFLOP/s for square and transformer shapes
// with numpy's figure and the ratio, the machine's copy bandwidth, and the
// memory-bound fused kernels in GB/s and as a share of that bandwidth.
//
//	go run ./tests/bench [-repeats 11] [-python /usr/bin/python3] [-idle 10s] [-peer-core NAME] [-quick]
//
// numpy runs at its best: Debian's numpy uses a DYNAMIC_ARCH OpenBLAS that
// falls back to generic kernels on CPUs newer than itself, so before the
// rounds a short sgemm calibration (package peercore, 6–7 s) runs each
// OpenBLAS core this CPU can execute and the library's own choice in a
// numpy process of its own, and the fastest is set as OPENBLAS_CORETYPE in
// numpy's environment only (-peer-core names it by hand; "default" is the
// library's own). Forge chooses its kernels itself and runs with no such
// variable, unless the user set OPENBLAS_CORETYPE: then both sides run the
// user's core and the header says so. The header prints both sides' BLAS
// library and core (numpy's as openblas_get_corename reports it in the
// numpy process), the table forge's matmul path per row and numpy's core
// in its column's name, and rows below 0.95× numpy are listed at the end.
//
// numpy runs in one long-lived python process (numpy_matmul.py, embedded)
// that times one request at a time. Each round times every forge row, then
// every numpy row, then pauses (numpy's OpenBLAS threads keep polling for a
// while after a call); both sides thus see the same machine over the run,
// and each figure is the median over the rounds. Without python or numpy the numpy column says why and the rest of
// the table is still measured.
//
// It uses the CPU backend directly (cpu.New()); float32 throughout.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
	"github.com/forgeml/forge/tests/bench/peercore"
)

var (
	repeats = flag.Int("repeats", 11, "timed rounds; each figure is the median")
	python  = flag.String("python", defaultPython(), "python with numpy for the reference column (\"\" to skip)")
	idle    = flag.Duration("idle", 10*time.Second, "before each round wait up to this long for an idle machine (0: never wait)")
	quick   = flag.Bool("quick", false, "only the 256³ matmul, the copy and the fused kernels (a smoke test)")
	peer    = flag.String("peer-core", "", "OpenBLAS core for numpy (OPENBLAS_CORETYPE in its environment; \"default\": the library's own); empty: the fastest in a short calibration")
)

// slowRatio is the forge/numpy ratio below which a row is listed as a gap.
const slowRatio = 0.95

// minSeconds is how long one timed sample runs (repeated calls).
const minSeconds = 0.02

// settle is the pause between numpy's samples and forge's next ones.
const settle = 200 * time.Millisecond

func defaultPython() string {
	// Debian's python has python3-numpy; a pyenv python3 on PATH may not.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// row is one line of the table.
type row struct {
	op, shape string
	unit      string // "GFLOP/s" or "GB/s"
	path      string // the forge code path that ran
	vsCopy    bool   // compare with the copy bandwidth (memory-bound kernels)
	note      string // replaces the measurement, e.g. "not implemented"

	forge    func() float64 // one forge sample (nil when note is set)
	numpyReq string         // request for the numpy process ("" for none)

	forgeRuns, numpyRuns []float64
	numpyErr             string
}

func main() {
	flag.Parse()
	be := cpu.New()
	be.Describe() // forge chooses its BLAS core now, before any child starts

	if *python != "" && *peer == "" {
		fmt.Fprintln(os.Stderr, "bench: choosing numpy's OpenBLAS core (a short sgemm calibration)…")
	}
	choice := peercore.Choose(*python, *peer)
	np := startNumpy(*python, choice.Env(os.Environ()))
	defer np.close()

	var rows []*row
	rows = append(rows, matmulRows(be)...)
	copyRow := copyBandwidthRow(be)
	rows = append(rows, copyRow)
	rows = append(rows, bandwidthRows(be)...)

	load := startLoadMonitor(np.pid())
	for r := 0; r < *repeats; r++ {
		waitIdle(*idle)
		for _, rw := range rows {
			if rw.forge != nil {
				rw.forgeRuns = append(rw.forgeRuns, rw.forge())
			}
		}
		if np.err != "" {
			continue
		}
		for _, rw := range rows {
			if rw.forge == nil || rw.numpyReq == "" {
				continue
			}
			v, err := np.run(rw.numpyReq)
			if err != "" {
				rw.numpyErr = err
			} else {
				rw.numpyRuns = append(rw.numpyRuns, v)
			}
		}
		// OpenBLAS's worker threads in the numpy process keep polling for
		// work for up to ~0.1 s after a call (OPENBLAS_THREAD_TIMEOUT,
		// 2^28 cycles by default) and take CPU from whatever runs next.
		time.Sleep(settle)
	}
	other := load.otherShare()

	printTable(be, rows, copyRow, np, choice, other)
}

// ---------------------------------------------------------------------------
// Matmul

type matmulShape struct {
	m, n, k        int
	transA, transB bool
	what           string
}

func (s matmulShape) op() string {
	op := [2]byte{'N', 'N'}
	if s.transA {
		op[0] = 'T'
	}
	if s.transB {
		op[1] = 'T'
	}
	return string(op[:])
}

var matmulShapes = []matmulShape{
	{m: 256, n: 256, k: 256},
	{m: 1024, n: 1024, k: 1024},
	{m: 2048, n: 2048, k: 2048},
	{m: 4096, n: 256, k: 1024, what: "x·W"},
	{m: 4096, n: 1024, k: 256, transB: true, what: "x·Wᵀ"},
	{m: 256, n: 1024, k: 4096, transA: true, what: "dW = xᵀ·dy"},
}

// matrix allocates a (rows, cols) float32 operand with random values,
// stored transposed (column-major view) when trans.
func matrix(be backend.Backend, r *rand.Rand, rows, cols int, trans bool) backend.View {
	buf := be.Alloc(backend.Float32, rows*cols)
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	be.Write(buf, data)
	if trans {
		return backend.View{Buf: buf, Shape: []int{rows, cols}, Strides: []int{1, rows}}
	}
	return backend.View{Buf: buf, Shape: []int{rows, cols}, Strides: []int{cols, 1}}
}

func matmulRows(be *cpu.Backend) []*row {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := matmulShapes
	if *quick {
		shapes = shapes[:1]
	}
	var rows []*row
	for _, s := range shapes {
		a := matrix(be, r, s.m, s.k, s.transA)
		b := matrix(be, r, s.k, s.n, s.transB)
		c := matrix(be, r, s.m, s.n, false)
		flops := 2 * float64(s.m) * float64(s.n) * float64(s.k)
		shape := fmt.Sprintf("%d×%d×%d", s.m, s.n, s.k)
		if s.what != "" {
			shape += " (" + s.what + ")"
		}
		be.MatMul(c, a, b, false) // the path is per product: name the one this takes
		rows = append(rows, &row{
			op: "matmul " + s.op(), shape: shape, unit: "GFLOP/s", path: be.Variant("matmul"),
			forge:    func() float64 { return flops / secondsPerCall(func() { be.MatMul(c, a, b, false) }) / 1e9 },
			numpyReq: fmt.Sprintf("%dx%dx%d:%s", s.m, s.n, s.k, s.op()),
		})
	}
	return rows
}

// ---------------------------------------------------------------------------
// Copy bandwidth: the yardstick for the memory-bound kernels.

const copyElems = 64 << 20 / 4 // 64 MiB of float32

func copyBandwidthRow(be *cpu.Backend) *row {
	src := contiguous(be, rand.New(rand.NewPCG(3, 4)), copyElems)
	dst := contiguous(be, nil, copyElems)
	bytes := 2 * 4 * float64(copyElems) // read + write
	return &row{
		op: "copy", shape: "64 MiB float32", unit: "GB/s", path: be.Variant("copy"),
		forge:    func() float64 { return bytes / secondsPerCall(func() { be.Copy(dst, src) }) / 1e9 },
		numpyReq: fmt.Sprintf("copy:%d", copyElems),
	}
}

// contiguous allocates a float32 view of the given shape, random values
// (zeros when r is nil).
func contiguous(be backend.Backend, r *rand.Rand, shape ...int) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := be.Alloc(backend.Float32, n)
	if r != nil {
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(r.NormFloat64())
		}
		be.Write(buf, data)
	}
	return backend.View{Buf: buf, Shape: shape, Strides: backend.ContiguousStrides(shape)}
}

// ---------------------------------------------------------------------------
// Memory-bound fused kernels.
//
// EXTENSION POINT: add a fused kernel here as one more entry of
// bandwidthRows, at the transformer sizes B=16, T=128, C=128 (H=4, D=32;
// V=512 for cross-entropy). bytes is what the kernel must move at least:
// every input read once and every output written once. The rate is shown
// in GB/s and as a share of the copy bandwidth measured above (these
// tensors are ~1 MB, so they may live in cache and exceed 100 %). A kernel
// the backend does not implement yet shows as "not implemented": its
// method panics with backend.ErrNotImplemented on a trial call.

const (
	benchB = 16
	benchT = 128
	benchC = 128
	benchH = 4
	benchD = 32
	benchV = 512
)

type fused struct {
	op, shape string
	bytes     float64 // minimum traffic of one call
	call      func()
}

func bandwidthRows(be *cpu.Backend) []*row {
	r := rand.New(rand.NewPCG(5, 6))
	const n = benchB * benchT // rows of (N, C) activations
	x := contiguous(be, r, n, benchC)
	y := contiguous(be, nil, n, benchC)
	w := contiguous(be, r, benchC)
	rstd := contiguous(be, nil, n)
	q := contiguous(be, r, benchB, benchH, benchT, benchD)
	k := contiguous(be, r, benchB, benchH, benchT, benchD)
	v := contiguous(be, r, benchB, benchH, benchT, benchD)
	out := contiguous(be, nil, benchB, benchH, benchT, benchD)
	lse := contiguous(be, nil, benchB, benchH, benchT)
	logits := contiguous(be, r, n, benchV)
	loss := contiguous(be, nil, n)
	ceLSE := contiguous(be, nil, n)
	targets := be.Alloc(backend.Int32, n)
	tv := make([]int32, n)
	for i := range tv {
		tv[i] = int32(r.IntN(benchV))
	}
	be.Write(targets, tv)
	targetsV := backend.View{Buf: targets, Shape: []int{n}, Strides: []int{1}}

	const f = 4.0 // bytes per float32
	bhtd := float64(benchB * benchH * benchT * benchD)
	kernels := []fused{
		{"softmax", fmt.Sprintf("(%d, %d)", n, benchC), f * 2 * n * benchC,
			func() { be.Softmax(y, x, false) }},
		{"rmsnorm", fmt.Sprintf("(%d, %d)", n, benchC), f * (2*n*benchC + benchC + n),
			func() { be.RMSNorm(y, rstd, x, w, 1e-6) }},
		{"attention", fmt.Sprintf("B%d H%d T%d D%d causal", benchB, benchH, benchT, benchD),
			f * (4*bhtd + benchB*benchH*benchT),
			func() {
				be.Attention(out, lse, q, k, v, backend.AttentionParams{Scale: 1 / math.Sqrt(benchD), Causal: true})
			}},
		{"cross_entropy", fmt.Sprintf("(%d, %d)", n, benchV), f * (n*benchV + 3*n),
			func() { be.CrossEntropy(loss, ceLSE, logits, targetsV, -1) }},
	}
	var rows []*row
	for _, kn := range kernels {
		rw := &row{op: kn.op, shape: kn.shape, unit: "GB/s", path: be.Variant(kn.op), vsCopy: true}
		if err := try(kn.call); err != "" {
			rw.note = err
		} else {
			bytes, call := kn.bytes, kn.call
			rw.forge = func() float64 { return bytes / secondsPerCall(call) / 1e9 }
		}
		rows = append(rows, rw)
	}
	return rows
}

// try calls fn once and reports a panic: "not implemented" for
// backend.ErrNotImplemented, the panic text otherwise.
func try(fn func()) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(backend.ErrNotImplemented); ok {
				msg = "not implemented"
				return
			}
			msg = fmt.Sprint("panic: ", p)
		}
	}()
	fn()
	return ""
}

// ---------------------------------------------------------------------------
// Timing and output

// secondsPerCall warms fn up, then times enough calls to last minSeconds.
func secondsPerCall(fn func()) float64 {
	fn()
	t0 := time.Now()
	fn()
	once := max(time.Since(t0).Seconds(), 1e-7)
	inner := max(1, int(minSeconds/once))
	t0 = time.Now()
	for i := 0; i < inner; i++ {
		fn()
	}
	return time.Since(t0).Seconds() / float64(inner)
}

func median(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printTable(be *cpu.Backend, rows []*row, copyRow *row, np *numpyProc, choice peercore.Choice, other float64) {
	fmt.Printf("forge bench: cpu backend, %s/%s, %s, %d workers, float32, median of %d rounds\n",
		runtime.GOOS, runtime.GOARCH, cpuModel(), runtime.GOMAXPROCS(0), *repeats)
	for _, l := range choice.ForgeLines("forge: cpu: ", be.Describe(), "numpy") {
		fmt.Println(l)
	}
	npCore := "numpy"
	if np.err != "" {
		fmt.Printf("numpy: unavailable (%s)\n", np.err)
	} else {
		core := np.core
		if core == "" {
			core = "not OpenBLAS"
		} else {
			npCore = "numpy " + core
		}
		fmt.Printf("numpy: %s, BLAS %s, core %s (%s), %d threads\n", np.version, np.blas, core, choice.Setting(), np.threads)
		fmt.Printf("numpy's core: %s\n", choice)
		if choice.Core != "" && np.core != "" && !strings.EqualFold(np.core, choice.Core) {
			fmt.Printf("WARNING: numpy was asked for %s but runs %s\n", choice.Core, np.core)
		}
	}
	fmt.Println()
	copyBW := median(copyRow.forgeRuns)
	t := [][]string{{"kernel", "shape", "forge", "", "forge path", npCore, "forge/numpy", "% of copy"}}
	var slow []string
	for _, rw := range rows {
		if rw.note != "" {
			t = append(t, []string{rw.op, rw.shape, rw.note, "", rw.path, "", "", ""})
			continue
		}
		f := median(rw.forgeRuns)
		npCol, ratio, share := "—", "", ""
		switch {
		case rw.numpyReq == "":
		case np.err != "":
			npCol = "n/a"
		case rw.numpyErr != "":
			npCol = "error"
		case len(rw.numpyRuns) > 0:
			nv := median(rw.numpyRuns)
			npCol = fmt.Sprintf("%.1f", nv)
			ratio = fmt.Sprintf("%.2f×", f/nv)
			if f/nv < slowRatio {
				slow = append(slow, fmt.Sprintf("%s %s %.2f×", rw.op, rw.shape, f/nv))
			}
		}
		if rw.vsCopy && copyBW > 0 {
			share = fmt.Sprintf("%.0f %%", 100*f/copyBW)
		}
		t = append(t, []string{rw.op, rw.shape, fmt.Sprintf("%.1f", f), rw.unit, rw.path, npCol, ratio, share})
	}
	printAligned(t, "LLRLLRRR")
	if len(slow) > 0 {
		fmt.Printf("below %.2f× numpy: %s\n", slowRatio, strings.Join(slow, "; "))
	}
	for _, rw := range rows {
		if rw.numpyErr != "" {
			fmt.Printf("numpy error for %s %s: %s\n", rw.op, rw.shape, rw.numpyErr)
		}
	}
	switch {
	case math.IsNaN(other):
	case other > 0.10:
		fmt.Printf("\nWARNING: other processes used %.0f %% of the CPUs during the run; the figures are unreliable.\n", 100*other)
	default:
		fmt.Printf("\nother processes used %.0f %% of the CPUs during the run.\n", 100*other)
	}
}

// printAligned prints t as columns: align[i] is 'L' or 'R' for column i;
// the first row is the header, underlined.
func printAligned(t [][]string, align string) {
	width := make([]int, len(align))
	for _, r := range t {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if align[i] == 'R' {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
			b.WriteString("  ")
		}
		fmt.Println(strings.TrimRight(b.String(), " "))
	}
	line(t[0])
	total := 0
	for _, w := range width {
		total += w + 2
	}
	fmt.Println(strings.Repeat("─", total-2))
	for _, r := range t[1:] {
		line(r)
	}
}

// cpuModel returns the CPU's model name where /proc/cpuinfo has it.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return runtime.GOARCH
}
