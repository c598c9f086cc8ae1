package metal

// The op tests' shared plumbing, and the tests of what the ops share
// (ops_layout.go: dtype checks, dispatch labels, empty extents). Each
// ops_X.go has its tests beside it in ops_X_test.go, covering float32,
// float16 and bfloat16 (where the op takes them; otherwise that they are
// refused) and the emulator's thread schedules.
//
// The ops run on the emulator ("metal-emu"), or the GPU under
// FORGE_BACKEND=metal (testDevice), against the CPU backend, on sizes that
// hit the kernels' edge paths (odd sizes, strided and broadcast views,
// offsets, more dims than the kernels index). opsEnv holds the device and
// the CPU; pair is one tensor on both; compare checks float32 results
// against the CPU's, check16 16-bit ones (below); schedulesAgree runs
// kernels under the forward, reverse and random thread schedules and
// requires the same bits.
//
// Tolerances. A float32 result must be within opsTol·max(1, |want|) of the
// CPU's (the conformance suite's float32 tolerance), unless a test says
// why it needs another bound. A 16-bit result is the float32 result rounded
// once, so it lies within half a unit in the last place of the 16-bit
// format (ulp16/2) of the device's float32 value, which lies within the
// float32 tests' tolerance of the CPU's: the bound checked is
// ulp16(|want|)/2 + opsTol·max(1, |want|), with ulp16 taken at the larger
// of the two magnitudes.
//
// check16 is the check of the kernels that have a float32 twin (norms,
// attention, softmax, cross-entropy, reductions, RoPE, SwiGLU, unary
// gradients): their 16-bit outputs, and float32 outputs computed from
// 16-bit inputs, against the device's float32 kernel on the widened inputs
// (bit for bit after rounding once; required on the emulator, logged on a
// GPU) and the CPU's float32 result (within the bound above, at the
// float32 test's tolerance). compareRounded checks a 16-bit result against
// the CPU's float32 one alone, within the same bound; compareBits16
// requires the CPU's bits (conversions).

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
	"github.com/forgeml/forge/forge/half"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// opsTol is the tolerance of the comparisons: |got − want| ≤ tol·max(1, |want|),
// the conformance suite's float32 tolerance.
const opsTol = 1e-5

// opsEnv is the device under test and the CPU reference.
type opsEnv struct {
	t   *testing.T
	dev *Backend
	ref *cpu.Backend
	rng *rand.Rand
}

func newOpsEnv(t *testing.T) *opsEnv {
	t.Helper()
	return &opsEnv{t: t, dev: opsDevice(t), ref: cpu.New(), rng: rand.New(rand.NewPCG(1, 2))}
}

var (
	opsDevOnce sync.Once
	opsDev     *Backend
	opsDevErr  error
)

// testDevice is the device the package's kernel tests run on: the GPU
// when FORGE_BACKEND=metal (make test-metal on a Mac), else the emulator.
// Tests of the emulator's thread schedules skip, saying so, on the GPU.
func testDevice() string {
	if os.Getenv("FORGE_BACKEND") == "metal" {
		return "metal"
	}
	return "metal-emu"
}

// opsDevice returns the device the op tests share (testDevice): one
// backend for the package's tests (the emulator's compile is cached
// across runs).
func opsDevice(t *testing.T) *Backend {
	t.Helper()
	opsDevOnce.Do(func() {
		b, err := backend.Open(testDevice())
		if err != nil {
			opsDevErr = err
			return
		}
		opsDev = b.(*Backend)
	})
	if opsDevErr != nil {
		skipUnavailable(t, opsDevErr)
	}
	return opsDev
}

// skipUnavailable skips t when err says the test device cannot run here
// (the emulator on a machine without clang, say) and fails it otherwise:
// a kernel file that does not compile must fail the tests, not skip them.
func skipUnavailable(t testing.TB, err error) {
	t.Helper()
	if testDevice() != "metal" && errors.Is(err, emu.ErrUnavailable) {
		t.Skipf("%s is not available here: %v", testDevice(), err)
	}
	t.Fatalf("%s: %v", testDevice(), err)
}

// openTestDevice opens testDevice as a forge device (see skipUnavailable).
func openTestDevice(t testing.TB) *forge.Device {
	t.Helper()
	dev, err := forge.OpenDevice(testDevice())
	if err != nil {
		skipUnavailable(t, err)
	}
	return dev
}

// vspec is a view: shape, strides and offset (strides nil: contiguous).
type vspec struct {
	shape, strides []int
	off            int
}

func contig(shape ...int) vspec { return vspec{shape: shape} }

func (s vspec) full() vspec {
	if s.strides == nil {
		s.strides = backend.ContiguousStrides(s.shape)
	}
	return s
}

// extent is the number of elements a buffer needs to hold the view.
func (s vspec) extent() int {
	s = s.full()
	n := s.off + 1
	for d, k := range s.shape {
		if k == 0 {
			return s.off
		}
		n += (k - 1) * s.strides[d]
	}
	return n
}

// pair is one tensor on both devices (identical contents).
type pair struct {
	dev, ref backend.View
	dt       backend.DType
	n        int
}

// newPair allocates a buffer for spec on both devices filled with gen(i)
// (rounded once for a 16-bit dt).
func (e *opsEnv) newPair(dt backend.DType, s vspec, gen func(i int) float64) pair {
	s = s.full()
	n := max(s.extent(), 1)
	db, rb := e.dev.Alloc(dt, n), e.ref.Alloc(dt, n)
	var h any
	switch dt {
	case backend.Float32:
		h = hostValues[float32](n, gen)
	case backend.Int32:
		h = hostValues[int32](n, gen)
	case backend.Float16, backend.BFloat16:
		h = narrowAll(dt, hostValues[float32](n, gen))
	}
	if h != nil {
		e.dev.Write(db, h)
		e.ref.Write(rb, h)
	}
	return pair{
		dev: backend.View{Buf: db, Offset: s.off, Shape: s.shape, Strides: s.strides},
		ref: backend.View{Buf: rb, Offset: s.off, Shape: s.shape, Strides: s.strides},
		dt:  dt, n: n,
	}
}

// hostValues is gen(0), …, gen(n−1) converted to T.
func hostValues[T float32 | int32](n int, gen func(i int) float64) []T {
	h := make([]T, n)
	for i := range h {
		h[i] = T(gen(i))
	}
	return h
}

func (e *opsEnv) normal(int) float64 { return e.rng.NormFloat64() }

func (e *opsEnv) uniform(lo, hi float64) func(int) float64 {
	return func(int) float64 { return lo + (hi-lo)*e.rng.Float64() }
}

// read returns both devices' whole buffers as float64.
func (e *opsEnv) read(p pair) (got, want []float64) {
	get := func(be backend.Backend, b backend.Buffer) []float64 {
		out := make([]float64, p.n)
		if p.dt == backend.Int32 {
			h := make([]int32, p.n)
			be.Read(b, h)
			for i, v := range h {
				out[i] = float64(v)
			}
			return out
		}
		h := make([]float32, p.n)
		be.Read(b, h)
		for i, v := range h {
			out[i] = float64(v)
		}
		return out
	}
	return get(e.dev, p.dev.Buf), get(e.ref, p.ref.Buf)
}

// compare checks the whole buffers of p (elements outside the view must
// be untouched on both) and returns the largest scaled difference.
func (e *opsEnv) compare(what string, p pair, tol float64) float64 {
	e.t.Helper()
	got, want := e.read(p)
	worst, bad := 0.0, -1
	for i := range got {
		g, w := got[i], want[i]
		var d float64
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			if math.IsNaN(w) != math.IsNaN(g) {
				d = math.Inf(1)
			}
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			if g != w {
				d = math.Inf(1)
			}
		default:
			d = math.Abs(g-w) / max(1, math.Abs(w))
		}
		if d > worst {
			worst = d
		}
		if d > tol && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		e.t.Errorf("%s: maxdiff %.2e > tol %.0e; first at element %d: got %.9g, want %.9g", what, worst, tol, bad, got[bad], want[bad])
	}
	return worst
}

// both runs fn on the device and on the reference.
func (e *opsEnv) both(fn func(be backend.Backend, pick func(pair) backend.View)) {
	fn(e.dev, func(p pair) backend.View { return p.dev })
	fn(e.ref, func(p pair) backend.View { return p.ref })
}

// manyDims is a view of 10 dimensions of 2 whose strides cannot be
// coalesced (every other dimension skips one), with an offset.
func manyDims() vspec {
	shape := make([]int, 10)
	strides := make([]int, 10)
	s := 1
	for d := 9; d >= 0; d-- {
		shape[d] = 2
		strides[d] = s
		s *= 3
	}
	return vspec{shape: shape, strides: strides, off: 5}
}

var halfTypes = []backend.DType{backend.Float16, backend.BFloat16}

// narrow16 rounds x to dt's bits (forge/half).
func narrow16(dt backend.DType, x float32) uint16 {
	if dt == backend.Float16 {
		return half.Float16Bits(x)
	}
	return half.BFloat16Bits(x)
}

// narrowAll rounds each of xs to dt's bits.
func narrowAll(dt backend.DType, xs []float32) []uint16 {
	bits := make([]uint16, len(xs))
	for i, x := range xs {
		bits[i] = narrow16(dt, x)
	}
	return bits
}

// widen16 is the float32 value of dt's bits h.
func widen16(dt backend.DType, h uint16) float32 {
	if dt == backend.Float16 {
		return half.Float16FromBits(h)
	}
	return half.BFloat16FromBits(h)
}

// ulp16 is the spacing of dt's numbers at magnitude x (the subnormal
// spacing below the normal range).
func ulp16(dt backend.DType, x float64) float64 {
	frac, emin := 10, -14
	if dt == backend.BFloat16 {
		frac, emin = 7, -126
	}
	x = math.Abs(x)
	e := emin
	if x >= math.Ldexp(1, emin) {
		_, e2 := math.Frexp(x) // x = f·2^e2, f in [0.5, 1)
		e = e2 - 1
	}
	return math.Ldexp(1, e-frac)
}

// newPair16 allocates spec on both devices as dt (16-bit), filled with
// gen(i) rounded to dt, and returns it with its float32 twin (the same
// values widened, on both devices).
func (e *opsEnv) newPair16(dt backend.DType, s vspec, gen func(i int) float64) (p16, p32 pair) {
	p16 = e.newPair(dt, s, gen)
	bits := make([]uint16, p16.n)
	e.ref.Read(p16.ref.Buf, bits)
	p32 = e.newPair(backend.Float32, s, func(i int) float64 { return float64(widen16(dt, bits[i])) })
	return p16, p32
}

// read16 returns the bits of p's buffer on the device and on the CPU.
func (e *opsEnv) read16(p pair) (got, want []uint16) {
	got, want = make([]uint16, p.n), make([]uint16, p.n)
	e.dev.Read(p.dev.Buf, got)
	e.ref.Read(p.ref.Buf, want)
	return got, want
}

// halfTol is a float32 test's tolerance at the CPU's value w.
type halfTol func(w float64) float64

// tolScaled is tol·max(1, |w|), the float32 tests' tolerance (opsTol,
// attnTol); tolScaled(0) asks for the CPU's value itself.
func tolScaled(tol float64) halfTol {
	return func(w float64) float64 { return tol * max(1, math.Abs(w)) }
}

// tolOps is the float32 ops tests' tolerance, opsTol·max(1, |w|).
var tolOps = tolScaled(opsTol)

// halfWorst is the worst of some check16 results: the largest error as a
// fraction of its bound; in units of ulp16 (16-bit outputs, over the
// elements where ulp16/2 is the larger part of the bound); as |got − w|;
// and the elements that are not the float32 kernel's result (rounded).
type halfWorst struct {
	ofBound, ulps, abs float64
	inexact            int
}

func (w *halfWorst) add(o halfWorst) {
	w.ofBound, w.ulps, w.abs = max(w.ofBound, o.ofBound), max(w.ulps, o.ulps), max(w.abs, o.abs)
	w.inexact += o.inexact
}

func (w halfWorst) String() string {
	s := fmt.Sprintf("worst %.3f of the bound", w.ofBound)
	if w.ulps > 0 {
		s += fmt.Sprintf(", %.2f ulp16", w.ulps)
	}
	s += fmt.Sprintf(", |err| %.1e", w.abs)
	if w.inexact > 0 {
		s += fmt.Sprintf("; %d elements not the float32 kernel's result", w.inexact)
	}
	return s
}

// onEmulator reports whether e's device is the emulator.
func (e *opsEnv) onEmulator() bool {
	_, ok := e.dev.Driver().(*emu.Driver)
	return ok
}

// check16 checks out, an output of a call on 16-bit data (16-bit, or
// float32 computed from 16-bit inputs), against twin: the same output of
// the float32 kernels on the inputs widened, the device's in twin.dev and
// the CPU's in twin.ref. Whole buffers are compared (elements outside the
// views must be untouched alike). Two checks:
//
//   - exact: out is the device's float32 result rounded once to out's
//     dtype on the host (forge/half), or its very bits for a float32 out;
//     NaN matches NaN. Required on the emulator, which runs the kernels as
//     written; on a GPU only logged, as its compiler may contract the
//     float32 and 16-bit instances of a kernel differently.
//   - bound: against the CPU's w, |got − w| ≤ ulp16/2 + tol(w), ulp16
//     taken at max(|got|, |w|) (for a float32 out, tol(w) alone): the
//     device's float32 result is within tol of w, and rounding it once
//     moves it by at most ulp16/2. NaN matches NaN, an infinity only
//     itself.
func (e *opsEnv) check16(what string, out, twin pair, tol halfTol) (w halfWorst) {
	e.t.Helper()
	dev32, cpu32 := make([]float32, twin.n), make([]float32, twin.n)
	e.dev.Read(twin.dev.Buf, dev32)
	e.ref.Read(twin.ref.Buf, cpu32)
	got := make([]float32, out.n)
	var bits []uint16 // a 16-bit out's
	if out.dt.IsHalf() {
		bits = make([]uint16, out.n)
		e.dev.Read(out.dev.Buf, bits)
		for i, h := range bits {
			got[i] = widen16(out.dt, h)
		}
	} else {
		e.dev.Read(out.dev.Buf, got)
	}
	show := func(i int) string {
		if bits == nil {
			return fmt.Sprintf("%.9g", got[i])
		}
		return fmt.Sprintf("%g (%#04x)", got[i], bits[i])
	}
	inexact, bad := -1, -1
	for i := range got {
		exact := math.Float32bits(got[i]) == math.Float32bits(dev32[i])
		if bits != nil {
			exact = bits[i] == narrow16(out.dt, dev32[i])
		}
		if !exact && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(dev32[i]))) {
			w.inexact++
			if inexact < 0 {
				inexact = i
			}
		}
		g, want := float64(got[i]), float64(cpu32[i])
		if math.IsNaN(g) || math.IsNaN(want) || math.IsInf(g, 0) || math.IsInf(want, 0) {
			if !(math.IsNaN(g) && math.IsNaN(want)) && g != want && bad < 0 {
				bad = i
			}
			continue
		}
		d, tw := math.Abs(g-want), tol(want)
		bound := tw
		if bits != nil {
			u := ulp16(out.dt, max(math.Abs(g), math.Abs(want)))
			if u/2 >= tw {
				w.ulps = max(w.ulps, d/u)
			}
			bound += u / 2
		}
		w.abs = max(w.abs, d)
		if bound > 0 {
			w.ofBound = max(w.ofBound, d/bound)
		}
		if d > bound && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		e.t.Errorf("%s: %v element %d: %s, the CPU's float32 result %.9g: beyond the bound (worst %.3g of it)",
			what, out.dt, bad, show(bad), cpu32[bad], w.ofBound)
	}
	if inexact >= 0 {
		i := inexact
		msg := fmt.Sprintf("%s: %d %v elements are not the float32 kernel's result; first %d: %s, the float32 kernel's %.9g",
			what, w.inexact, out.dt, i, show(i), dev32[i])
		if bits != nil {
			msg += fmt.Sprintf(", which rounds to %#04x", narrow16(out.dt, dev32[i]))
		}
		if e.onEmulator() {
			e.t.Error(msg)
		} else {
			e.t.Log(msg)
		}
	}
	return w
}

// compareBits16 requires p's buffers to be the same bits on both devices.
func (e *opsEnv) compareBits16(what string, p pair) {
	e.t.Helper()
	got, want := e.read16(p)
	for i := range got {
		if got[i] != want[i] {
			e.t.Errorf("%s: element %d: %#04x (%g), the CPU has %#04x (%g)", what, i,
				got[i], widen16(p.dt, got[i]), want[i], widen16(p.dt, want[i]))
			return
		}
	}
}

// compareRounded checks the 16-bit result d16 (device) against the CPU's
// float32 result r32 (computed from the same rounded inputs) within
// ulp16/2 + opsTol·max(1, |want|), and returns the largest error in units
// of ulp16 and the share of elements that equal r32 rounded on the host.
func (e *opsEnv) compareRounded(what string, d16, r32 pair) (worstUlp, exact float64) {
	e.t.Helper()
	got := make([]uint16, d16.n)
	e.dev.Read(d16.dev.Buf, got)
	want := make([]float32, r32.n)
	e.ref.Read(r32.ref.Buf, want)
	same := 0
	reported := false
	for i := range got {
		w := float64(want[i])
		g := float64(widen16(d16.dt, got[i]))
		if got[i] == narrow16(d16.dt, want[i]) {
			same++
			continue
		}
		var d float64
		switch {
		case math.IsNaN(w) || math.IsNaN(g) || math.IsInf(w, 0) || math.IsInf(g, 0):
			d = math.Inf(1)
		default:
			d = math.Abs(g - w)
		}
		u := ulp16(d16.dt, max(math.Abs(g), math.Abs(w)))
		worstUlp = max(worstUlp, d/u)
		if d > u/2+opsTol*max(1, math.Abs(w)) && !reported {
			e.t.Errorf("%s: element %d: %g (%#04x), the CPU's float32 result is %.9g (rounds to %#04x)",
				what, i, g, got[i], w, narrow16(d16.dt, want[i]))
			reported = true
		}
	}
	return worstUlp, float64(same) / float64(len(got))
}

// mhFill returns a generator of the constant c.
func mhFill(c float64) func(int) float64 { return func(int) float64 { return c } }

type f64Buf struct{}

func (f64Buf) Len() int { return 2 }

func (f64Buf) DType() backend.DType { return backend.Float64 }

// refusesFloat64 makes the calls (by the name of the kernel each would
// launch) on a Backend without a device, with float64 views: each must
// panic "metal: <kernel>: float64 is not supported" (the dtype check runs
// before any kernel).
func refusesFloat64(t *testing.T, calls func(b *Backend, f64 backend.View) map[string]func()) {
	t.Helper()
	f64 := backend.View{Buf: f64Buf{}, Shape: []int{2}, Strides: []int{1}}
	for name, fn := range calls(&Backend{}, f64) {
		wantPanic(t, name+" on float64", fn, "metal: "+name+": float64 is not supported")
	}
}

// opsPanic runs fn and returns its panic message, or "no panic".
func opsPanic(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return "no panic"
}

// wantPanic requires fn (the call name) to panic with a message that
// starts with prefix and contains each of words.
func wantPanic(t *testing.T, name string, fn func(), prefix string, words ...string) {
	t.Helper()
	msg := opsPanic(fn)
	if msg == "no panic" {
		t.Errorf("%s: no panic", name)
		return
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("%s: panic %q, want it to start %q", name, msg, prefix)
		return
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: panic %q does not say %q", name, msg, w)
		}
	}
}

// schedulesAgree runs run (which launches kernels on drv and returns the
// bits of their outputs) under the forward schedule, then again under
// forward, reverse and three random schedules, and reports every output
// that differs from the first run: a kernel whose result depends on the
// order of its threads is missing a barrier. label, if not nil, names
// output i in the message.
func schedulesAgree(t *testing.T, drv *emu.Driver, run func() [][]uint32, label func(i int) string) {
	t.Helper()
	drv.SetSchedule(emu.Forward, 0)
	want := run()
	for _, s := range []struct {
		s    emu.Schedule
		seed uint64
	}{{emu.Forward, 0}, {emu.Reverse, 0}, {emu.Random, 1}, {emu.Random, 2}, {emu.Random, 3}} {
		drv.SetSchedule(s.s, s.seed)
		got := run()
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					what := fmt.Sprintf("output %d", i)
					if label != nil {
						what += " (" + label(i) + ")"
					}
					t.Errorf("schedule %v seed %d: %s element %d: %08x, the first forward run gives %08x", s.s, s.seed, what, j, got[i][j], want[i][j])
					break
				}
			}
		}
	}
	drv.SetSchedule(emu.Forward, 0)
}

// readBits returns the bits of b's first n elements (float32, int32 or
// 16-bit) on dev, for schedulesAgree.
func readBits(dev *Backend, b backend.Buffer, n int) []uint32 {
	bits := make([]uint32, n)
	switch b.DType() {
	case backend.Float32:
		h := make([]float32, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = math.Float32bits(x)
		}
	case backend.Int32:
		h := make([]int32, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = uint32(x)
		}
	default:
		h := make([]uint16, n)
		dev.Read(b, h)
		for i, x := range h {
			bits[i] = uint32(x)
		}
	}
	return bits
}

// contigView is the contiguous view of shape at offset off of b.
func contigView(b backend.Buffer, off int, shape ...int) backend.View {
	return backend.View{Buf: b, Offset: off, Shape: shape, Strides: backend.ContiguousStrides(shape)}
}

func opsBenchDevice(b *testing.B) *Backend {
	drv, err := emu.Open(kernels.Sources(), emu.Options{})
	if err != nil {
		skipUnavailable(b, err)
	}
	return New(drv)
}

// benchView is a contiguous float32 tensor of shape on dev holding
// i%17/17 + base.
func benchView(dev *Backend, base float32, shape ...int) backend.View {
	n := 1
	for _, d := range shape {
		n *= d
	}
	buf := dev.Alloc(backend.Float32, n)
	h := make([]float32, n)
	for i := range h {
		h[i] = float32(i%17)/17 + base
	}
	dev.Write(buf, h)
	return contigView(buf, 0, shape...)
}

// TestOpsEmpty covers empty extents: a sum over nothing is 0, ops on no
// elements do nothing.
func TestOpsEmpty(t *testing.T) {
	e := newOpsEnv(t)
	src := e.newPair(backend.Float32, contig(4, 0), e.normal)
	dst := e.newPair(backend.Float32, contig(4), func(int) float64 { return 5 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(backend.ReduceSum, v(dst), v(src), 1) })
	e.compare("sum over an empty extent", dst, 0)
	none := e.newPair(backend.Float32, contig(0, 3), e.normal)
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.Fill(v(none), 1)
		be.Unary(backend.Exp, backend.Scalars{}, v(none), v(none))
		be.Binary(backend.Add, v(none), v(none), v(none))
		be.Softmax(v(none), v(none), false)
		be.Reduce(backend.ReduceMax, backend.View{Buf: v(dst).Buf, Shape: []int{0}, Strides: []int{1}}, v(none), 1)
	})
	e.compare("ops on no elements", none, 0)
	e.compare("max over no rows", dst, 0)
	wantPanic(t, "max over an empty extent", func() { e.dev.Reduce(backend.ReduceMax, dst.dev, src.dev, 1) }, "")
}

// TestOpsUnknownOp: an op number past the last (backend.NumUnaryOps, …)
// panics naming the kernel, before any table is indexed with it; and the
// dispatch labels cover every op.
func TestOpsUnknownOp(t *testing.T) {
	b := &Backend{} // no device: the checks come first
	v := backend.View{Buf: f64Buf{}, Shape: []int{2}, Strides: []int{1}}
	wantPanic(t, "unary", func() { b.Unary(backend.NumUnaryOps, backend.Scalars{}, v, v) }, "metal: unary_f32: unknown op")
	wantPanic(t, "unary_grad", func() { b.UnaryGrad(backend.NumUnaryOps, backend.Scalars{}, v, v, v, v) }, "metal: unary_grad_f32: unknown op")
	wantPanic(t, "binary", func() { b.Binary(backend.NumBinaryOps, v, v, v) }, "metal: binary_f32: unknown op")
	for _, dt := range floatTypes {
		for name, l := range map[string]struct{ got, want int }{
			"unary":      {len(unaryLabels[dt]), int(backend.NumUnaryOps)},
			"unary_grad": {len(unaryGradLabels[dt]), int(backend.NumUnaryOps)},
			"binary":     {len(binaryLabels[dt]), int(backend.NumBinaryOps)},
			"reduce":     {len(reduceLabels[dt]), int(backend.NumReduceOps)},
		} {
			if l.got != l.want {
				t.Errorf("%s %v: %d dispatch labels for %d ops", name, dt, l.got, l.want)
			}
		}
	}
}
