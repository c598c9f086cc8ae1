package metal

// The 16-bit storage dtypes (float16, bfloat16) on the emulator: Write and
// Read of bit patterns, Fill and Copy bit for bit against package
// forge/half and the CPU backend (every float16 and bfloat16 widened,
// narrowing on many float32 and int32 values), the elementwise ops and the
// mixed-precision matmul against the CPU's float32 results computed from
// the same rounded inputs, and bit-identical results across thread
// schedules.
//
// Tolerances. A 16-bit result is the float32 result rounded once, so it
// lies within half a unit in the last place of the 16-bit format (ulp16/2)
// of the device's float32 value, which lies within the float32 tests'
// tolerance (opsTol·max(1, |want|)) of the CPU's: the bound checked is
// ulp16(|want|)/2 + opsTol·max(1, |want|), with ulp16 taken at the larger
// of the two magnitudes. Matmul products of two 16-bit values are exact in
// float32, so a float32 dst differs from an exact (float64) sum of the
// same terms only by float32 accumulation: |got − exact| ≤ γ·Σ|terms|
// with γ = n·2⁻²⁴/(1 − n·2⁻²⁴) for the n = K+1 terms (c and the K
// products), a bound that holds for every summation order (tiles, split-K
// partials); a 16-bit dst adds ulp16/2 to that. And a 16-bit dst must be
// exactly the float32-dst kernel's result rounded once on the host.
//
// check16 is the check of the kernels that have a float32 twin (norms,
// attention, softmax, cross-entropy, reductions, RoPE, SwiGLU): their
// 16-bit outputs, and float32 outputs computed from 16-bit inputs,
// against the device's float32 kernel on the widened inputs (bit for bit
// after rounding once; required on the emulator, logged on a GPU) and the
// CPU's float32 result (within the bound above, at the float32 test's
// tolerance).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/half"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

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

func TestHalfWriteRead(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for _, n := range []int{1, 7, 1000} {
			buf := e.dev.Alloc(dt, n)
			if buf.DType() != dt || buf.Len() != n {
				t.Fatalf("Alloc(%v, %d): %v × %d", dt, n, buf.DType(), buf.Len())
			}
			in := make([]uint16, n)
			for i := range in {
				in[i] = uint16(e.rng.Uint32())
			}
			e.dev.Write(buf, in)
			out := make([]uint16, n)
			e.dev.Read(buf, out)
			for i := range in {
				if out[i] != in[i] {
					t.Fatalf("%v × %d: element %d reads %#04x, wrote %#04x", dt, n, i, out[i], in[i])
				}
			}
			// A shorter write and read touch only their prefix.
			e.dev.Write(buf, []uint16{0xabcd})
			short := make([]uint16, 1)
			e.dev.Read(buf, short)
			if short[0] != 0xabcd {
				t.Errorf("%v: short write/read: %#04x", dt, short[0])
			}
		}
		for name, fn := range map[string]func(){
			"write float32":  func() { e.dev.Write(e.dev.Alloc(dt, 2), []float32{1, 2}) },
			"read int32":     func() { e.dev.Read(e.dev.Alloc(dt, 2), make([]int32, 2)) },
			"write too many": func() { e.dev.Write(e.dev.Alloc(dt, 2), make([]uint16, 3)) },
		} {
			wantPanic(t, fmt.Sprintf("%v: %s", dt, name), fn, "")
		}
	}
	wantPanic(t, "[]uint16 into a float32 buffer", func() { e.dev.Write(e.dev.Alloc(backend.Float32, 2), []uint16{1, 2}) }, "")
}

// TestHalfWidenExhaustive widens every float16 and bfloat16 bit pattern to
// float32 (bits equal to forge/half's, NaN payloads included), and
// converts each to the other 16-bit format (bits equal to the CPU's).
func TestHalfWidenExhaustive(t *testing.T) {
	e := newOpsEnv(t)
	const n = 1 << 16
	all := make([]uint16, n)
	for i := range all {
		all[i] = uint16(i)
	}
	for _, dt := range halfTypes {
		src := e.dev.Alloc(dt, n)
		e.dev.Write(src, all)
		dst := e.dev.Alloc(backend.Float32, n)
		sv := backend.View{Buf: src, Shape: []int{n}, Strides: []int{1}}
		e.dev.Copy(backend.View{Buf: dst, Shape: []int{n}, Strides: []int{1}}, sv)
		got := make([]float32, n)
		e.dev.Read(dst, got)
		bad := 0
		for i, h := range all {
			want := widen16(dt, h)
			if math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad == 0 {
					t.Errorf("%v %#04x → float32: %#08x, forge/half gives %#08x", dt, h, math.Float32bits(got[i]), math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%v → float32: %d of %d patterns differ", dt, bad, n)
		}
		// To the other 16-bit format, against the CPU.
		other := backend.BFloat16
		if dt == backend.BFloat16 {
			other = backend.Float16
		}
		p := e.newPair(other, contig(n), func(int) float64 { return 0 })
		rsrc := e.ref.Alloc(dt, n)
		e.ref.Write(rsrc, all)
		e.dev.Copy(p.dev, sv)
		e.ref.Copy(p.ref, backend.View{Buf: rsrc, Shape: []int{n}, Strides: []int{1}})
		e.compareBits16(fmt.Sprintf("%v → %v, every pattern", dt, other), p)
	}
}

// narrowingValues are float32 inputs for the narrowing conversions: every
// special class of both formats (zeros, subnormals and their boundaries,
// the overflow threshold, NaNs with payloads, infinities), every exact tie
// between neighbouring finite 16-bit values of either format with its two
// float32 neighbours (each sign), and random bit patterns and magnitudes.
func narrowingValues(rng *rand.Rand) []float32 {
	var v []float32
	add := func(x float32) { v = append(v, x, -x) }
	for _, x := range []float32{0, 1, 65504, 65519, 65519.996, 65520, 65536, 1e10,
		float32(math.Ldexp(1, -24)), float32(math.Ldexp(1, -25)), float32(math.Ldexp(1.0000001, -25)),
		float32(math.Ldexp(1, -14)), float32(math.Ldexp(1023, -24)), float32(math.Ldexp(1, -126)),
		math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.Inf(1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0x7f800001), math.Float32frombits(0x7fa5a5a5),
		math.Float32frombits(0x7f7f8000), math.Float32frombits(0x7f7fffff), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000)} {
		add(x)
	}
	// Every tie of both formats (and its float32 neighbours).
	for _, dt := range halfTypes {
		for h := uint16(0); h < 0x7fff; h++ {
			lo, hi := widen16(dt, h), widen16(dt, h+1)
			if math.IsNaN(float64(hi)) || math.IsInf(float64(hi), 0) || math.IsNaN(float64(lo)) || math.IsInf(float64(lo), 0) {
				continue
			}
			mid := float32((float64(lo) + float64(hi)) / 2) // exact: a tie
			add(mid)
			add(math.Nextafter32(mid, 0))
			add(math.Nextafter32(mid, float32(math.Inf(1))))
		}
	}
	for i := 0; i < 30000; i++ {
		v = append(v, math.Float32frombits(rng.Uint32()))
	}
	for i := 0; i < 10000; i++ {
		v = append(v, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(40)-20))))
	}
	return v
}

// TestHalfNarrowing converts many float32 and int32 values to both 16-bit
// formats: the bits must be forge/half's (float32) and the CPU's (int32,
// which rounds the exact integer once), and 16-bit → int32 the CPU's.
func TestHalfNarrowing(t *testing.T) {
	e := newOpsEnv(t)
	vals := narrowingValues(e.rng)
	n := len(vals)
	src := e.dev.Alloc(backend.Float32, n)
	e.dev.Write(src, vals)
	for _, dt := range halfTypes {
		dst := e.dev.Alloc(dt, n)
		e.dev.Copy(backend.View{Buf: dst, Shape: []int{n}, Strides: []int{1}}, backend.View{Buf: src, Shape: []int{n}, Strides: []int{1}})
		got := make([]uint16, n)
		e.dev.Read(dst, got)
		bad := 0
		for i, x := range vals {
			if want := narrow16(dt, x); got[i] != want {
				if bad < 5 {
					t.Errorf("float32 %#08x (%g) → %v: %#04x, forge/half gives %#04x", math.Float32bits(x), x, dt, got[i], want)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("float32 → %v: %d of %d values differ", dt, bad, n)
		}
		t.Logf("float32 → %v: %d values, all bits equal to forge/half: %v", dt, n, bad == 0)

		// int32 → 16-bit: the full range, integers at and around the
		// double-rounding cases (2^24 + 2^16 + 1 and friends), the ends.
		ints := []int32{0, 1, -1, 65504, 65519, 65520, 65521, -65520, 1<<24 + 1<<16 + 1, 1<<24 + 1<<16, 1<<24 + 1<<16 - 1,
			1<<24 + 1, 1<<25 + 3, math.MaxInt32, math.MinInt32, math.MinInt32 + 1, -(1<<24 + 1<<16 + 1)}
		for i := 0; i < 20000; i++ {
			x := int32(e.rng.Uint32())
			if i%2 == 0 {
				x >>= e.rng.IntN(31)
			}
			ints = append(ints, x)
		}
		ip := e.newPair(backend.Int32, contig(len(ints)), func(i int) float64 { return float64(ints[i]) })
		hp := e.newPair(dt, contig(len(ints)), func(int) float64 { return 0 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(hp), v(ip)) })
		e.compareBits16(fmt.Sprintf("int32 → %v", dt), hp)

		// 16-bit → int32 on values well inside int32's range (beyond it the
		// conversion is the platform's: Go and x86 give MinInt32, a GPU
		// saturates).
		hv := e.newPair(dt, contig(5000), func(int) float64 {
			return e.rng.NormFloat64() * math.Pow(2, float64(e.rng.IntN(26)))
		})
		if dt == backend.Float16 {
			hv = e.newPair(dt, contig(5000), e.uniform(-65504, 65504))
		}
		iv := e.newPair(backend.Int32, contig(5000), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(iv), v(hv)) })
		e.compare(fmt.Sprintf("%v → int32", dt), iv, 0)
	}
}

// TestHalfCopyLayouts runs Copy between every pair with a 16-bit side over
// strided, transposed, broadcast and many-dimension views, bit for bit
// against the CPU.
func TestHalfCopyLayouts(t *testing.T) {
	e := newOpsEnv(t)
	all := []backend.DType{backend.Float32, backend.Int32, backend.Float16, backend.BFloat16}
	gen := e.uniform(-3000, 3000)
	for _, c := range copyCases {
		for _, ddt := range all {
			for _, sdt := range all {
				if !ddt.IsHalf() && !sdt.IsHalf() {
					continue
				}
				src := e.newPair(sdt, c.src, gen)
				dst := e.newPair(ddt, c.dst, func(int) float64 { return 9 })
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Copy(v(dst), v(src)) })
				what := fmt.Sprintf("copy %v←%v dst %v src %v", ddt, sdt, c.dst, c.src)
				if ddt.IsHalf() {
					e.compareBits16(what, dst)
				} else {
					e.compare(what, dst, 0)
				}
			}
		}
	}
}

func TestHalfFill(t *testing.T) {
	e := newOpsEnv(t)
	values := []float64{-2.75, 1.0 / 3, 65519.99, 65520, 1e-8, 3e-8, 1 + 1.0/256 + 1e-12, math.Inf(-1), math.NaN(), 1e39}
	for _, s := range fillSpecs {
		for _, dt := range halfTypes {
			for _, v := range values {
				p := e.newPair(dt, s, func(i int) float64 { return float64(i % 7) })
				e.both(func(be backend.Backend, vw func(pair) backend.View) { be.Fill(vw(p), v) })
				e.compareBits16(fmt.Sprintf("fill %v %v with %g", dt, s, v), p)
			}
		}
	}
}

func TestHalfUnary(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for op := backend.Neg; op < backend.NumUnaryOps; op++ {
			ss := unaryScalars[op]
			if ss == nil {
				ss = []backend.Scalars{{}}
			}
			worst, exact, cnt := 0.0, 0.0, 0
			for _, s := range ss {
				for _, sh := range unaryShapes {
					src16, src32 := e.newPair16(dt, sh.src, e.unaryDomain(op))
					dst16, dst32 := e.newPair16(dt, sh.dst, func(int) float64 { return 7 })
					e.dev.Unary(op, s, dst16.dev, src16.dev)
					e.ref.Unary(op, s, dst32.ref, src32.ref)
					w, x := e.compareRounded(fmt.Sprintf("unary %v %v %v %v", dt, op, s, sh.src), dst16, dst32)
					worst, exact, cnt = max(worst, w), exact+x, cnt+1
				}
			}
			t.Logf("unary %-9v %-12v worst %.2f ulp16 off the CPU's float32 result; %.4f of elements equal it rounded", dt, op, worst, exact/float64(cnt))
		}
		// In place, and UnaryGrad (all four views of the dtype).
		x16, x32 := e.newPair16(dt, contig(33, 3), e.unaryDomain(backend.Tanh))
		e.dev.Unary(backend.Tanh, backend.Scalars{}, x16.dev, x16.dev)
		e.ref.Unary(backend.Tanh, backend.Scalars{}, x32.ref, x32.ref)
		e.compareRounded(fmt.Sprintf("unary %v tanh in place", dt), x16, x32)
		for _, op := range []backend.UnaryOp{backend.Tanh, backend.SiLU, backend.GELUTanh, backend.Exp} {
			xx16, xx32 := e.newPair16(dt, contig(9, 37), e.unaryDomain(op))
			y16, y32 := e.newPair16(dt, contig(9, 37), func(int) float64 { return 0 })
			// y from the rounded x on both, then rounded: the CPU gets y16's bits widened.
			e.dev.Unary(op, backend.Scalars{}, y16.dev, xx16.dev)
			yb := make([]uint16, y16.n)
			e.dev.Read(y16.dev.Buf, yb)
			yw := make([]float32, len(yb))
			for i, h := range yb {
				yw[i] = widen16(dt, h)
			}
			e.ref.Write(y32.ref.Buf, yw)
			g16, g32 := e.newPair16(dt, vspec{shape: []int{9, 37}, strides: []int{0, 1}, off: 1}, e.normal)
			dx16, dx32 := e.newPair16(dt, contig(9, 37), func(int) float64 { return 5 })
			e.dev.UnaryGrad(op, backend.Scalars{}, dx16.dev, xx16.dev, y16.dev, g16.dev)
			e.ref.UnaryGrad(op, backend.Scalars{}, dx32.ref, xx32.ref, y32.ref, g32.ref)
			w, _ := e.compareRounded(fmt.Sprintf("unary_grad %v %v", dt, op), dx16, dx32)
			t.Logf("unary_grad %-9v %-10v worst %.2f ulp16", dt, op, w)
		}
	}
}

func TestHalfBinary(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		for op := backend.Add; op < backend.NumBinaryOps; op++ {
			worst, exact, cnt := 0.0, 0.0, 0
			for _, c := range binaryCases {
				ga, gb := e.binaryInputs(op)
				a16, a32 := e.newPair16(dt, c.a, ga)
				b16, b32 := e.newPair16(dt, c.b, gb)
				d16, d32 := e.newPair16(dt, c.dst, func(int) float64 { return 3 })
				e.dev.Binary(op, d16.dev, a16.dev, b16.dev)
				e.ref.Binary(op, d32.ref, a32.ref, b32.ref)
				w, x := e.compareRounded(fmt.Sprintf("binary %v %v dst %v", dt, op, c.dst), d16, d32)
				worst, exact, cnt = max(worst, w), exact+x, cnt+1
			}
			t.Logf("binary %-9v %-8v worst %.2f ulp16; %.4f exact", dt, op, worst, exact/float64(cnt))
		}
		// Overflow to ±Inf (float16), NaN through maximum, and a sum that
		// rounds: computed in float32, rounded once.
		a16, a32 := e.newPair16(dt, contig(5), func(i int) float64 { return []float64{60000, -60000, math.NaN(), 1, 2049}[i] })
		b16, b32 := e.newPair16(dt, contig(5), func(i int) float64 { return []float64{60000, -60000, 1, math.NaN(), 1}[i] })
		for _, op := range []backend.BinaryOp{backend.Add, backend.Maximum} {
			d16, d32 := e.newPair16(dt, contig(5), func(int) float64 { return 0 })
			e.dev.Binary(op, d16.dev, a16.dev, b16.dev)
			e.ref.Binary(op, d32.ref, a32.ref, b32.ref)
			got := make([]uint16, 5)
			e.dev.Read(d16.dev.Buf, got)
			want := make([]float32, 5)
			e.ref.Read(d32.ref.Buf, want)
			for i := range got {
				w := narrow16(dt, want[i])
				if got[i] != w && !(math.IsNaN(float64(want[i])) && math.IsNaN(float64(widen16(dt, got[i])))) {
					t.Errorf("binary %v %v special %d: %#04x, want %#04x (%g rounded)", dt, op, i, got[i], w, want[i])
				}
			}
		}
	}
}

// TestHalfWhere: Where with 16-bit data or a 16-bit cond (the CPU's Where
// takes neither: its reference runs on the float32 twins, which hold the
// same values, and the data moves unconverted).
func TestHalfWhere(t *testing.T) {
	e := newOpsEnv(t)
	all := []backend.DType{backend.Float32, backend.Int32, backend.Float16, backend.BFloat16}
	// mk returns the view on the device (dtype dt) and its CPU twin (dt,
	// or float32 for a 16-bit dt).
	mk := func(dt backend.DType, s vspec, gen func(int) float64) (dev, ref backend.View, p16 pair) {
		if dt.IsHalf() {
			p, p32 := e.newPair16(dt, s, gen)
			return p.dev, p32.ref, p
		}
		p := e.newPair(dt, s, gen)
		return p.dev, p.ref, p
	}
	for _, dt := range all {
		for _, cdt := range all {
			if !dt.IsHalf() && !cdt.IsHalf() {
				continue
			}
			for _, sh := range whereShapes {
				// -0 is zero and NaN is not, in every float cond.
				cgen := func(i int) float64 { return []float64{0, 1, -2, math.Copysign(0, -1), 3, math.NaN()}[e.rng.IntN(6)] }
				if cdt == backend.Int32 {
					cgen = func(i int) float64 { return []float64{0, 1, -2, 0, 3}[e.rng.IntN(5)] }
				}
				cd, cr, _ := mk(cdt, sh.c, cgen)
				ad, ar, _ := mk(dt, sh.a, e.uniform(-100, 100))
				bd, br, _ := mk(dt, sh.b, e.uniform(-100, 100))
				dd, dr, dp := mk(dt, sh.dst, func(int) float64 { return 1 })
				e.dev.Where(dd, cd, ad, bd)
				e.ref.Where(dr, cr, ar, br)
				what := fmt.Sprintf("where %v cond %v %v", dt, cdt, sh.c)
				if !dt.IsHalf() {
					e.compare(what, dp, 0)
					continue
				}
				got := make([]uint16, dp.n)
				e.dev.Read(dd.Buf, got)
				want := make([]float32, dp.n)
				e.ref.Read(dr.Buf, want)
				for i := range got {
					if w := narrow16(dt, want[i]); got[i] != w {
						t.Errorf("%s: element %d: %#04x, want %#04x", what, i, got[i], w)
						break
					}
				}
			}
		}
	}
}

// mmExact returns, for dst (M, N) = a @ b (+ c), the float64 sums and the
// sums of magnitudes of their terms, from the float32 values the device
// holds (host slices of the whole buffers, views as specs).
func mmExact(m, n, k int, a, b []float32, as, bs vspec, c []float64) (exact, mag []float64) {
	as, bs = as.full(), bs.full()
	exact, mag = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s, g := 0.0, 0.0
			if c != nil {
				s, g = c[i*n+j], math.Abs(c[i*n+j])
			}
			for l := 0; l < k; l++ {
				x := float64(a[as.off+i*as.strides[0]+l*as.strides[1]]) * float64(b[bs.off+l*bs.strides[0]+j*bs.strides[1]])
				s += x
				g += math.Abs(x)
			}
			exact[i*n+j], mag[i*n+j] = s, g
		}
	}
	return exact, mag
}

// gamma is the float32 accumulation error factor of n terms: n·u/(1 − n·u).
func gamma(n int) float64 {
	u := math.Ldexp(1, -24)
	return float64(n) * u / (1 - float64(n)*u)
}

// TestHalfMatMul: float16 and bfloat16 operands (every layout, odd sizes
// for every edge path, accumulate, tiled and naive kernels, split-K),
// float32 and 16-bit dst. See the file's comment for the tolerances.
func TestHalfMatMul(t *testing.T) {
	e := newOpsEnv(t)
	type mcase struct{ m, n, k int }
	sizes := []mcase{{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {64, 64, 64}, {32, 32, 16}, {8, 40, 3}, {1, 70, 33}, {45, 1, 20}, {45, 70, 1000}}
	for _, dt := range halfTypes {
		for _, naive := range []bool{false, true} {
			naiveMatMul.Store(naive)
			worst32, worst16, worstCPU := 0.0, 0.0, 0.0
			for _, s := range sizes {
				if naive && s.k > 100 {
					continue
				}
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						for _, acc := range []bool{false, true} {
							name := fmt.Sprintf("matmul %v naive=%v %dx%dx%d %s acc=%v", dt, naive, s.m, s.n, s.k, layoutTag(ta, tb), acc)
							w32, w16, wc := e.halfMatMulCase(name, dt, nil, nil, nil, s.m, s.n, s.k, ta, tb, acc)
							worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
						}
					}
				}
			}
			// Batched with a broadcast batch dim and a transposed b; a
			// batch of a against one b.
			for _, s := range []mcase{{7, 13, 5}, {33, 40, 17}} {
				for _, acc := range []bool{false, true} {
					name := fmt.Sprintf("matmul %v naive=%v batched bcast %v acc=%v", dt, naive, s, acc)
					w32, w16, wc := e.halfMatMulCase(name, dt, []int{2, 3}, []int{0, 1}, []int{1}, s.m, s.n, s.k, false, true, acc)
					worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
					name = fmt.Sprintf("matmul %v naive=%v batched x 2d %v acc=%v", dt, naive, s, acc)
					w32, w16, wc = e.halfMatMulCase(name, dt, []int{5}, []int{1}, nil, s.m, s.n, s.k, true, false, acc)
					worst32, worst16, worstCPU = max(worst32, w32), max(worst16, w16), max(worstCPU, wc)
				}
			}
			t.Logf("matmul %-9v naive=%v: float32 dst worst %.3f of the γ bound; 16-bit dst worst %.3f of its bound; worst vs the CPU's float32 %.2e",
				dt, naive, worst32, worst16, worstCPU)
		}
	}
	naiveMatMul.Store(false)
	// Mixed dtypes are refused.
	a16 := e.newPair(backend.Float16, contig(2, 2), e.normal)
	b16 := e.newPair(backend.BFloat16, contig(2, 2), e.normal)
	c32 := e.newPair(backend.Float32, contig(2, 2), e.normal)
	wantPanic(t, "float16 @ bfloat16", func() { e.dev.MatMul(c32.dev, a16.dev, b16.dev, false) }, "")
	wantPanic(t, "float16 @ float16 into bfloat16", func() { e.dev.MatMul(b16.dev, a16.dev, a16.dev, false) }, "")
}

// halfMatMulCase runs one product of 16-bit operands into a float32 dst
// and into a 16-bit dst (the same old values when accumulating) and checks
// both (see the file's comment). It returns the worst error of each as a
// fraction of its bound, and the worst difference from the CPU's float32
// product (scaled by max(1, |want|)).
func (e *opsEnv) halfMatMulCase(name string, dt backend.DType, batch, abs, bbs []int, m, n, k int, ta, tb, acc bool) (f32, f16, cpu float64) {
	e.t.Helper()
	var as, bs vspec
	nb := 1
	for _, d := range batch {
		nb *= d
	}
	if batch == nil {
		as, bs = mmOperand(nil, nil, m, k, ta, 1), mmOperand(nil, nil, k, n, tb, 2)
	} else {
		as = mmOperand(batch, abs, m, k, ta, 0)
		if bbs == nil { // one b for the whole batch
			bs = mmOperand(nil, nil, k, n, tb, 3)
		} else {
			bs = mmOperand(batch[len(batch)-len(bbs):], bbs, k, n, tb, 3)
		}
	}
	a16, a32 := e.newPair16(dt, as, e.normal)
	b16, b32 := e.newPair16(dt, bs, e.normal)
	cshape := append(append([]int(nil), batch...), m, n)
	c16, c32 := e.newPair16(dt, contig(cshape...), e.normal) // c32: c16's values widened
	cd32 := e.newPair(backend.Float32, contig(cshape...), func(i int) float64 { return 0 })
	// The float32 dst starts from the same (widened) values.
	old := make([]float32, c32.n)
	e.ref.Read(c32.ref.Buf, old)
	e.dev.Write(cd32.dev.Buf, old)
	e.dev.MatMul(cd32.dev, a16.dev, b16.dev, acc)
	e.dev.MatMul(c16.dev, a16.dev, b16.dev, acc)
	e.ref.MatMul(c32.ref, a32.ref, b32.ref, acc)

	got32 := make([]float32, cd32.n)
	e.dev.Read(cd32.dev.Buf, got32)
	got16 := make([]uint16, c16.n)
	e.dev.Read(c16.dev.Buf, got16)
	cpu32 := make([]float32, c32.n)
	e.ref.Read(c32.ref.Buf, cpu32)
	ah, bh := make([]float32, a32.n), make([]float32, b32.n)
	e.ref.Read(a32.ref.Buf, ah)
	e.ref.Read(b32.ref.Buf, bh)

	// Per batch: the exact sums from the matrices' host values.
	mat := m * n
	bad32, bad16, badCPU, badRound := false, false, false, false
	for z := 0; z < nb; z++ {
		// The batch offsets of a and b (row-major over batch dims).
		aoff, boff := as.off, bs.off
		rem := z
		for d := len(batch) - 1; d >= 0; d-- {
			i := rem % batch[d]
			rem /= batch[d]
			aoff += i * as.strides[d]
			if bbs != nil {
				bd := d - (len(batch) - len(bbs))
				if bd >= 0 {
					boff += i * bs.strides[bd]
				}
			}
		}
		am := vspec{shape: as.shape[len(as.shape)-2:], strides: as.strides[len(as.strides)-2:], off: aoff}
		bm := vspec{shape: bs.shape[len(bs.shape)-2:], strides: bs.strides[len(bs.strides)-2:], off: boff}
		var cold []float64
		if acc {
			cold = make([]float64, mat)
			for i := range cold {
				cold[i] = float64(old[z*mat+i])
			}
		}
		exact, mag := mmExact(m, n, k, ah, bh, am, bm, cold)
		terms := k
		if acc {
			terms++
		}
		g := gamma(terms)
		for i := 0; i < mat; i++ {
			x := exact[i]
			b32 := g * mag[i]
			if b32 == 0 {
				b32 = math.SmallestNonzeroFloat64
			}
			d32 := math.Abs(float64(got32[z*mat+i]) - x)
			f32 = max(f32, d32/b32)
			if d32 > b32 && !bad32 {
				e.t.Errorf("%s: float32 dst element %d: %.9g, exact %.9g, bound %.3g", name, z*mat+i, got32[z*mat+i], x, b32)
				bad32 = true
			}
			h := got16[z*mat+i]
			hv := float64(widen16(dt, h))
			b16 := ulp16(dt, max(math.Abs(hv), math.Abs(x)+b32))/2 + b32
			d16 := math.Abs(hv - x)
			f16 = max(f16, d16/b16)
			if d16 > b16 && !bad16 {
				e.t.Errorf("%s: %v dst element %d: %g (%#04x), exact %.9g, bound %.3g", name, dt, z*mat+i, hv, h, x, b16)
				bad16 = true
			}
			// Rounded once: the 16-bit dst is the float32 dst's value
			// rounded — required on the emulator, logged on a GPU (check16's
			// rule: its compiler may contract the two instances apart).
			if want := narrow16(dt, got32[z*mat+i]); h != want && !badRound {
				msg := fmt.Sprintf("%s: %v dst element %d: %#04x, the float32 dst %.9g rounds to %#04x", name, dt, z*mat+i, h, got32[z*mat+i], want)
				if e.onEmulator() {
					e.t.Error(msg)
				} else {
					e.t.Log(msg)
				}
				badRound = true
			}
			w := float64(cpu32[z*mat+i])
			dc := math.Abs(float64(got32[z*mat+i])-w) / max(1, math.Abs(w))
			cpu = max(cpu, dc)
			if dc > splitTol(k) && !badCPU {
				e.t.Errorf("%s: float32 dst element %d: %.9g, the CPU's float32 product %.9g", name, z*mat+i, got32[z*mat+i], w)
				badCPU = true
			}
		}
	}
	return f32, f16, cpu
}

// TestHalfSchedules: the 16-bit kernels give the same bits under every
// emulator thread schedule (matmul tiles with edges, split-K, accumulate).
func TestHalfSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(7, 8))
	host := make([]float32, 45*1000+1000*70+45*70)
	for i := range host {
		host[i] = float32(gen.NormFloat64())
	}
	run := func() [][]uint32 {
		var outs [][]uint32
		for _, dt := range halfTypes {
			buf := e.dev.Alloc(dt, len(host))
			bits := narrowAll(dt, host)
			e.dev.Write(buf, bits)
			for _, shape := range []struct{ m, n, k int }{{33, 65, 17}, {45, 70, 1000}} {
				m, n, k := shape.m, shape.n, shape.k
				a := backend.View{Buf: buf, Shape: []int{m, k}, Strides: []int{1, m}}
				bm := backend.View{Buf: buf, Offset: m * k, Shape: []int{k, n}, Strides: []int{n, 1}}
				c16 := backend.View{Buf: buf, Offset: m*k + k*n, Shape: []int{m, n}, Strides: []int{n, 1}}
				c32b := e.dev.Alloc(backend.Float32, m*n)
				c32 := backend.View{Buf: c32b, Shape: []int{m, n}, Strides: []int{n, 1}}
				e.dev.Copy(c32, c16)
				e.dev.MatMul(c32, a, bm, true)
				e.dev.MatMul(c16, a, bm, true)
				c16bits := readBits(e.dev, buf, len(host))[m*k+k*n:][:m*n]
				outs = append(outs, readBits(e.dev, c32b, m*n), c16bits)
				e.dev.Write(buf, bits) // restore c for the next run
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string {
		return fmt.Sprintf("%v %s dst", halfTypes[i/4], []string{"33x65x17 float32", "33x65x17 16-bit", "45x70x1000 float32", "45x70x1000 16-bit"}[i%4])
	})
}

// TestHalfKernelNames checks that every kernel the 16-bit paths launch is
// defined in the embedded sources.
func TestHalfKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{kFill16, kCopyCvt, kWhere16, kWhereC16, kWhere16C16}
	for _, dt := range floatTypes {
		tag := dtypeTag(dt)
		names = append(names, kernels.Name("unary", tag), kernels.Name("unary", "grad", tag), kernels.Name("binary", tag))
		for _, out := range []backend.DType{backend.Float32, dt} {
			kn := matmulKernels(dt, out)
			names = append(names, kn.tiled, kn.naive, kn.splitK, kn.reduce)
		}
	}
	for _, k := range names {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings by dtype (go test -bench Half -run '^$' ./metal): they
// measure the emulation, not a GPU.
func BenchmarkHalf(b *testing.B) {
	dev := opsBenchDevice(b)
	const big = 1 << 20
	vec := func(dt backend.DType) backend.View {
		return backend.View{Buf: dev.Alloc(dt, big), Shape: []int{big}, Strides: []int{1}}
	}
	x32 := vec(backend.Float32)
	dev.Fill(x32, 0.5)
	for _, dt := range []backend.DType{backend.Float32, backend.Float16, backend.BFloat16} {
		x, y, z := vec(dt), vec(dt), vec(dt)
		dev.Copy(x, x32)
		dev.Copy(y, x32)
		b.Run(fmt.Sprintf("binary_add_1M_%v", dt), func(b *testing.B) {
			for b.Loop() {
				dev.Binary(backend.Add, z, x, y)
				dev.Sync()
			}
		})
		if dt != backend.Float32 {
			b.Run(fmt.Sprintf("copy_1M_float32_to_%v", dt), func(b *testing.B) {
				for b.Loop() {
					dev.Copy(z, x32)
					dev.Sync()
				}
			})
		}
	}
	for _, s := range []int{128, 256} {
		for _, dt := range []backend.DType{backend.Float32, backend.Float16, backend.BFloat16} {
			outs := []backend.DType{backend.Float32, dt}
			if dt == backend.Float32 {
				outs = outs[:1]
			}
			for _, out := range outs {
				up := func(dt backend.DType) backend.View {
					buf := dev.Alloc(dt, s*s)
					if dt == backend.Float32 {
						h := make([]float32, s*s)
						for i := range h {
							h[i] = float32(i%17) / 17
						}
						dev.Write(buf, h)
					} else {
						h := make([]uint16, s*s)
						for i := range h {
							h[i] = narrow16(dt, float32(i%17)/17)
						}
						dev.Write(buf, h)
					}
					return backend.View{Buf: buf, Shape: []int{s, s}, Strides: []int{s, 1}}
				}
				a, bm, c := up(dt), up(dt), up(out)
				b.Run(fmt.Sprintf("%d_%v_to_%v", s, dt, out), func(b *testing.B) {
					for b.Loop() {
						dev.MatMul(c, a, bm, false)
						dev.Sync()
					}
				})
			}
		}
	}
}

// TestHalfRefused: dtype combinations no kernel takes (mixed 16-bit
// dtypes, a 16-bit output from float32 inputs, int32 arithmetic) panic
// naming the kernel.
func TestHalfRefused(t *testing.T) {
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(4), e.normal)
	f := e.newPair(backend.Float32, contig(4), e.normal)
	i := e.newPair(backend.Int32, contig(4), func(int) float64 { return 1 })
	r := e.newPair(backend.Float32, contig(1), e.normal)
	for name, fn := range map[string]func(){
		"unary f16←f32":       func() { e.dev.Unary(backend.Exp, backend.Scalars{}, h.dev, f.dev) },
		"unary_grad mixed":    func() { e.dev.UnaryGrad(backend.Tanh, backend.Scalars{}, h.dev, h.dev, bf.dev, h.dev) },
		"binary f16 f16 bf16": func() { e.dev.Binary(backend.Add, h.dev, h.dev, bf.dev) },
		"binary int32":        func() { e.dev.Binary(backend.Add, i.dev, i.dev, i.dev) },
		"where f16←f32":       func() { e.dev.Where(h.dev, i.dev, f.dev, h.dev) },
		"reduce int32 into f32": func() {
			e.dev.Reduce(backend.ReduceSum, backend.View{Buf: r.dev.Buf, Shape: []int{}, Strides: []int{}}, i.dev, 1)
		},
		"softmax f16←bf16":     func() { e.dev.Softmax(h.dev, bf.dev, false) },
		"matmul f16 into bf16": func() { e.dev.MatMul(bf.dev, h.dev, h.dev, false) },
	} {
		wantPanic(t, name, fn, "metal: ")
	}
}
