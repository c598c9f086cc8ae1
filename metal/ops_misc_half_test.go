package metal

// The float16 and bfloat16 kernels of softmax, cross-entropy, reduce,
// SumSquares, SwiGLU and RoPE on the emulator, against the device's own
// float32 kernels and the CPU backend's float32 results on the same
// rounded (widened) inputs; bit-identical results across thread schedules;
// the dtype combinations that are refused.
//
// Tolerances. Every one of these kernels widens its 16-bit inputs exactly,
// computes in float32 exactly as its float32 instance does, and rounds each
// 16-bit output once. So a 16-bit output must be
//
//   - bit for bit the device's float32 kernel's output for the widened
//     inputs, rounded once on the host (forge/half); and
//   - within ulp16/2 of that float32 value, which is within the float32
//     tests' tolerance tol32 of the CPU's float32 result: the bound checked
//     is ulp16(max(|got|, |want|))/2 + tol32(want), with tol32 =
//     opsTol·max(1, |want|) as in TestOpsSoftmax, TestOpsReduce,
//     TestOpsRoPE and TestOpsSwiGLU; 2e-5·|want| + 1e-30 (relative) for
//     the cross-entropy gradients as in TestOpsCrossEntropy; 0 for max and
//     min, whose results are input values.
//
// Float32 outputs computed from 16-bit inputs (loss, lse, reductions into
// a float32 dst, sums of squares) must equal the float32 kernel's output
// for the widened inputs bit for bit and lie within tol32 of the CPU's;
// int32 indices must equal the CPU's. NaN matches NaN (payloads aside).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// mhTol is a float32 test's tolerance at the CPU's value w.
type mhTol func(w float64) float64

func mhAbs(w float64) float64 { return opsTol * max(1, math.Abs(w)) }
func mhRel(w float64) float64 { return 2e-5*math.Abs(w) + 1e-30 }
func mhExact(float64) float64 { return 0 }

// mhWorst is the worst error seen by a group of checks: as a fraction of
// the bound, and in units of ulp16 (16-bit outputs) or as |got − want|
// (float32 outputs).
type mhWorst struct{ ofBound, err float64 }

func (w *mhWorst) add(o mhWorst) {
	w.ofBound = max(w.ofBound, o.ofBound)
	w.err = max(w.err, o.err)
}

// mhSpecial compares two values that are not both finite: NaN matches NaN,
// an infinity only itself. It reports whether got and want are both
// finite (then the caller measures the difference).
func mhSpecial(got, want float64) (finite, ok bool) {
	if math.IsNaN(got) || math.IsNaN(want) {
		return false, math.IsNaN(got) && math.IsNaN(want)
	}
	if math.IsInf(got, 0) || math.IsInf(want, 0) {
		return false, got == want
	}
	return true, true
}

// mhCheck16 checks the 16-bit output o16 (its device buffer) against o32,
// whose device buffer holds the device's float32 kernel's output and whose
// CPU buffer the CPU's, both from the widened inputs (see the file's
// comment). Whole buffers are compared: elements outside the views must
// be untouched alike.
func (e *opsEnv) mhCheck16(what string, o16, o32 pair, tol mhTol) (w mhWorst) {
	e.t.Helper()
	got := make([]uint16, o16.n)
	e.dev.Read(o16.dev.Buf, got)
	dev32, cpu32 := make([]float32, o32.n), make([]float32, o32.n)
	e.dev.Read(o32.dev.Buf, dev32)
	e.ref.Read(o32.ref.Buf, cpu32)
	dt := o16.dt
	badRound, badBound := false, false
	for i, h := range got {
		g := float64(widen16(dt, h))
		// Rounded once from the float32 kernel's value.
		if r := narrow16(dt, dev32[i]); h != r && !(math.IsNaN(g) && math.IsNaN(float64(dev32[i]))) && !badRound {
			e.t.Errorf("%s: %v element %d: %#04x (%g); the float32 kernel gives %.9g, which rounds to %#04x",
				what, dt, i, h, g, dev32[i], r)
			badRound = true
		}
		want := float64(cpu32[i])
		finite, ok := mhSpecial(g, want)
		if !finite {
			if !ok && !badBound {
				e.t.Errorf("%s: %v element %d: %g (%#04x), the CPU's float32 result is %g", what, dt, i, g, h, want)
				badBound = true
			}
			continue
		}
		d := math.Abs(g - want)
		u := ulp16(dt, max(math.Abs(g), math.Abs(want)))
		bound := u/2 + tol(want)
		w.err = max(w.err, d/u)
		w.ofBound = max(w.ofBound, d/bound)
		if d > bound && !badBound {
			e.t.Errorf("%s: %v element %d: %g (%#04x), the CPU's float32 result %.9g: error %.3g > bound %.3g (%.2f ulp16)",
				what, dt, i, g, h, want, d, bound, d/u)
			badBound = true
		}
	}
	return w
}

// mhCheck32 checks the float32 output o (its device buffer, computed from
// 16-bit inputs) against o32 (the device's float32 kernel and the CPU, on
// the widened inputs): equal bits to the former, within tol of the latter.
func (e *opsEnv) mhCheck32(what string, o, o32 pair, tol mhTol) (w mhWorst) {
	e.t.Helper()
	got, dev32, cpu32 := make([]float32, o.n), make([]float32, o32.n), make([]float32, o32.n)
	e.dev.Read(o.dev.Buf, got)
	e.dev.Read(o32.dev.Buf, dev32)
	e.ref.Read(o32.ref.Buf, cpu32)
	badBits, badBound := false, false
	for i := range got {
		g, want := float64(got[i]), float64(cpu32[i])
		if math.Float32bits(got[i]) != math.Float32bits(dev32[i]) && !(math.IsNaN(g) && math.IsNaN(float64(dev32[i]))) && !badBits {
			e.t.Errorf("%s: element %d: %.9g, the float32 kernel on the widened inputs gives %.9g", what, i, got[i], dev32[i])
			badBits = true
		}
		finite, ok := mhSpecial(g, want)
		if !finite {
			if !ok && !badBound {
				e.t.Errorf("%s: element %d: %g, the CPU's float32 result is %g", what, i, g, want)
				badBound = true
			}
			continue
		}
		d := math.Abs(g - want)
		bound := tol(want)
		w.err = max(w.err, d)
		if bound > 0 {
			w.ofBound = max(w.ofBound, d/bound)
		}
		if d > bound && !badBound {
			e.t.Errorf("%s: element %d: %.9g, the CPU's float32 result %.9g: error %.3g > bound %.3g", what, i, g, want, d, bound)
			badBound = true
		}
	}
	return w
}

// mhCheckIndex requires the int32 output o (device) to equal o32's CPU
// result and o32's device (float32 kernel) result.
func (e *opsEnv) mhCheckIndex(what string, o, o32 pair) {
	e.t.Helper()
	got, dev32, cpu32 := make([]int32, o.n), make([]int32, o32.n), make([]int32, o32.n)
	e.dev.Read(o.dev.Buf, got)
	e.dev.Read(o32.dev.Buf, dev32)
	e.ref.Read(o32.ref.Buf, cpu32)
	for i := range got {
		if got[i] != cpu32[i] || got[i] != dev32[i] {
			e.t.Errorf("%s: element %d: index %d, the CPU gives %d, the float32 kernel %d", what, i, got[i], cpu32[i], dev32[i])
			return
		}
	}
}

// mhFill returns a generator of the constant c.
func mhFill(c float64) func(int) float64 { return func(int) float64 { return c } }

func TestMiscHalfSoftmax(t *testing.T) {
	e := newOpsEnv(t)
	shapes := [][]int{{1}, {5, 7}, {3, 1000}, {2, 3, 33}, {17, 300}}
	specials := [][]float64{
		{1, math.NaN(), 2}, {1, math.Inf(1), 2}, {math.Inf(-1), math.Inf(-1), math.Inf(-1)}, {math.Inf(-1), 3, 1},
	}
	for _, dt := range halfTypes {
		for _, log := range []bool{false, true} {
			var fw, bw mhWorst
			for _, sh := range shapes {
				what := fmt.Sprintf("softmax %v log=%v %v", dt, log, sh)
				x16, x32 := e.newPair16(dt, contig(sh...), func(int) float64 { return 4 * e.rng.NormFloat64() })
				y16, y32 := e.newPair16(dt, contig(sh...), mhFill(0.5))
				e.dev.Softmax(y16.dev, x16.dev, log)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y32), v(x32), log) })
				fw.add(e.mhCheck16(what, y16, y32, mhAbs))

				// The backward from the CPU's forward rounded to dt.
				yh := make([]float32, y32.n)
				e.ref.Read(y32.ref.Buf, yh)
				yy16, yy32 := e.newPair16(dt, contig(sh...), func(i int) float64 { return float64(yh[i]) })
				dy16, dy32 := e.newPair16(dt, contig(sh...), e.normal)
				dx16, dx32 := e.newPair16(dt, contig(sh...), mhFill(0.5))
				e.dev.SoftmaxBackward(dx16.dev, yy16.dev, dy16.dev, log)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.SoftmaxBackward(v(dx32), v(yy32), v(dy32), log)
				})
				bw.add(e.mhCheck16("backward "+what, dx16, dx32, mhAbs))
			}
			// Rows with NaN, +Inf, only −Inf, and −Inf among finite values.
			for _, r := range specials {
				x16, x32 := e.newPair16(dt, contig(2, 3), func(i int) float64 { return r[i%3] })
				y16, y32 := e.newPair16(dt, contig(2, 3), mhFill(0.5))
				e.dev.Softmax(y16.dev, x16.dev, log)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y32), v(x32), log) })
				e.mhCheck16(fmt.Sprintf("softmax %v log=%v of %v", dt, log, r), y16, y32, mhAbs)
			}
			t.Logf("softmax %-8v log=%-5v forward worst %.2f ulp16 (%.2f of the bound), backward worst %.2f ulp16 (%.2f of the bound)",
				dt, log, fw.err, fw.ofBound, bw.err, bw.ofBound)
		}
	}
}

func TestMiscHalfCrossEntropy(t *testing.T) {
	e := newOpsEnv(t)
	const ignore = -100
	cases := []struct {
		n, v int
		kind string
	}{
		{1, 1, "normal"}, {5, 7, "normal"}, {3, 1000, "normal"}, {33, 257, "normal"},
		{9, 500, "large"}, {40, 64, "confident"}, {100, 40, "ties"},
	}
	for _, dt := range halfTypes {
		var loss, lse, grad mhWorst
		for _, c := range cases {
			tg := make([]int32, c.n)
			for i := range tg {
				tg[i] = int32(e.rng.IntN(c.v))
				if c.n > 1 && i%4 == 1 {
					tg[i] = ignore
				}
			}
			for _, ign := range []int{ignore, int(tg[0])} { // ignore a real class too
				what := fmt.Sprintf("cross_entropy %v %dx%d %s ignore %d", dt, c.n, c.v, c.kind, ign)
				targets := e.newPair(backend.Int32, contig(c.n), func(i int) float64 {
					if tg[i] == ignore {
						return float64(ign)
					}
					return float64(tg[i])
				})
				lg16, lg32 := e.newPair16(dt, contig(c.n, c.v), e.ceLogits(c.kind, c.v, tg))
				lossH, lseH := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				loss32, lse32 := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ign)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ign)
				})
				loss.add(e.mhCheck32(what+" loss", lossH, loss32, mhAbs))
				lse.add(e.mhCheck32(what+" lse", lseH, lse32, mhAbs))

				// The backward from the CPU's lse on both; then in place
				// (dlogits = logits).
				lh := make([]float32, c.n)
				e.ref.Read(lse32.ref.Buf, lh)
				lse2 := e.newPair(backend.Float32, contig(c.n), func(i int) float64 { return float64(lh[i]) })
				scale := 0.7 / float64(c.n)
				dl16, dl32 := e.newPair16(dt, contig(c.n, c.v), mhFill(3))
				e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lse2.dev, targets.dev, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(dl32), v(lg32), v(lse2), v(targets), ign, scale)
				})
				grad.add(e.mhCheck16(what+" backward", dl16, dl32, mhRel))
				e.dev.CrossEntropyBackward(lg16.dev, lg16.dev, lse2.dev, targets.dev, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(lg32), v(lg32), v(lse2), v(targets), ign, scale)
				})
				grad.add(e.mhCheck16(what+" backward in place", lg16, lg32, mhRel))
			}
		}
		// Special rows: NaN, +Inf, only −Inf, −Inf at the target, −Inf
		// elsewhere; each with its target ignored and not.
		rows := [][]float64{
			{1, math.NaN(), 2, 0}, {1, math.Inf(1), 2, 0},
			{math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)},
			{math.Inf(-1), 3, 1, 0}, {2, math.Inf(-1), 1, 5},
		}
		for _, r := range rows {
			what := fmt.Sprintf("cross_entropy %v of %v", dt, r)
			tg := []int32{0, ignore, 2}
			targets := e.newPair(backend.Int32, contig(3), func(i int) float64 { return float64(tg[i]) })
			lg16, lg32 := e.newPair16(dt, contig(3, 4), func(i int) float64 { return r[i%4] })
			lossH, lseH := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			loss32, lse32 := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ignore)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ignore)
			})
			e.mhCheck32(what+" loss", lossH, loss32, mhAbs)
			e.mhCheck32(what+" lse", lseH, lse32, mhAbs)
			dl16, dl32 := e.newPair16(dt, contig(3, 4), mhFill(3))
			e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lseH.dev, targets.dev, ignore, 0.5)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropyBackward(v(dl32), v(lg32), v(lse32), v(targets), ignore, 0.5)
			})
			e.mhCheck16(what+" backward", dl16, dl32, mhRel)
		}
		// Strided targets and no loss; a finite lse for rows holding NaN
		// and +Inf (the unnormalised branch).
		tgs := []int32{1, 0, 2, 1}
		targets := e.newPair(backend.Int32, vspec{shape: []int{2}, strides: []int{2}, off: 1}, func(i int) float64 { return float64(tgs[i]) })
		lg16, lg32 := e.newPair16(dt, contig(2, 3), e.normal)
		lseH, lse32 := e.newPair(backend.Float32, contig(2), mhFill(3)), e.newPair(backend.Float32, contig(2), mhFill(3))
		e.dev.CrossEntropy(backend.View{}, lseH.dev, lg16.dev, targets.dev, ignore)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropy(backend.View{}, v(lse32), v(lg32), v(targets), ignore)
		})
		lse.add(e.mhCheck32(fmt.Sprintf("cross_entropy %v without loss, strided targets", dt), lseH, lse32, mhAbs))
		nan16, nan32 := e.newPair16(dt, contig(2, 3), func(i int) float64 { return []float64{1, math.NaN(), -2, 0.5, 3, math.Inf(1)}[i] })
		lseFin := e.newPair(backend.Float32, contig(2), func(i int) float64 { return []float64{1.5, 4}[i] })
		dl16, dl32 := e.newPair16(dt, contig(2, 3), mhFill(3))
		e.dev.CrossEntropyBackward(dl16.dev, nan16.dev, lseFin.dev, targets.dev, ignore, 0.25)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropyBackward(v(dl32), v(nan32), v(lseFin), v(targets), ignore, 0.25)
		})
		e.mhCheck16(fmt.Sprintf("cross_entropy_backward %v of NaN/+Inf rows with a finite lse", dt), dl16, dl32, mhRel)
		t.Logf("cross_entropy %-8v loss worst |err| %.2e (%.2f of the bound), lse %.2e (%.2f); dlogits worst %.2f ulp16 (%.2f of the bound)",
			dt, loss.err, loss.ofBound, lse.err, lse.ofBound, grad.err, grad.ofBound)
	}
}

func TestMiscHalfReduce(t *testing.T) {
	e := newOpsEnv(t)
	cases := []struct {
		src  vspec
		nred int
	}{
		{contig(7, 13), 1},
		{contig(3, 5, 33), 2},
		{contig(2000), 1},    // one output, 1024 threads
		{contig(300, 37), 1}, // many outputs
		{vspec{shape: []int{13, 7}, strides: []int{1, 13}}, 1}, // down columns
		{vspec{shape: []int{4, 6, 5}, strides: []int{1, 20, 4}, off: 3}, 2},
		{vspec{shape: []int{4, 9}, strides: []int{0, 1}}, 1}, // broadcast
		{contig(4, 3), 0},
		{manyDims(), 5},
		{manyDims(), 9}, // more reduced dims than the kernel indexes: a contiguous copy first
	}
	specials := [][]float64{
		{1, math.NaN(), 3, math.NaN()},
		{math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)},
		{2, math.Inf(1), 5, math.Inf(1)},
		{-1, -1, -1, -1},
	}
	for _, dt := range halfTypes {
		for op := backend.ReduceSum; op <= backend.ReduceArgMin; op++ {
			tol := mhAbs
			if op != backend.ReduceSum {
				tol = mhExact
			}
			var w16, w32 mhWorst
			run := func(what string, sv vspec, nred int, gen func(int) float64) {
				s16, s32 := e.newPair16(dt, sv, gen)
				kept := contig(sv.shape[:len(sv.shape)-nred]...)
				if op >= backend.ReduceArgMax {
					di, di32 := e.newPair(backend.Int32, kept, mhFill(-7)), e.newPair(backend.Int32, kept, mhFill(-7))
					e.dev.Reduce(op, di.dev, s16.dev, nred)
					e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(di32), v(s32), nred) })
					e.mhCheckIndex(what, di, di32)
					return
				}
				// Into float32, and into the src's dtype.
				df, df32 := e.newPair(backend.Float32, kept, mhFill(-7)), e.newPair(backend.Float32, kept, mhFill(-7))
				d16, _ := e.newPair16(dt, kept, mhFill(-7))
				e.dev.Reduce(op, df.dev, s16.dev, nred)
				e.dev.Reduce(op, d16.dev, s16.dev, nred)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(df32), v(s32), nred) })
				w32.add(e.mhCheck32(what+" into float32", df, df32, tol))
				w16.add(e.mhCheck16(fmt.Sprintf("%s into %v", what, dt), d16, df32, tol))
			}
			for _, c := range cases {
				gen := e.normal
				if op >= backend.ReduceArgMax {
					gen = func(int) float64 { return float64(e.rng.IntN(9)) } // ties
				}
				run(fmt.Sprintf("reduce %v %v %v nred %d", dt, op, c.src, c.nred), c.src, c.nred, gen)
			}
			for _, r := range specials {
				run(fmt.Sprintf("reduce %v %v of %v", dt, op, r), contig(40, 4), 1, func(i int) float64 { return r[i%4] })
			}
			if op < backend.ReduceArgMax {
				t.Logf("reduce %-8v %-7v into float32: worst |err| %.2e (%.2f of the bound); into %v: worst %.2f ulp16 (%.2f of the bound)",
					dt, op, w32.err, w32.ofBound, dt, w16.err, w16.ofBound)
			}
		}
		// A sum over nothing is 0 in either dst dtype.
		src, _ := e.newPair16(dt, contig(4, 0), e.normal)
		d16, _ := e.newPair16(dt, contig(4), mhFill(5))
		e.dev.Reduce(backend.ReduceSum, d16.dev, src.dev, 1)
		got, _ := e.read16(d16)
		for i, h := range got[:4] {
			if h != 0 {
				t.Errorf("%v sum over an empty extent: element %d is %#04x", dt, i, h)
			}
		}
	}
}

func TestMiscHalfSumSquares(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var w mhWorst
		worstRel := 0.0
		for _, n := range []int{0, 1, 1000, sumSqBlock + 1, 3*sumSqBlock/2 + 77} {
			what := fmt.Sprintf("sum_squares %v n=%d", dt, n)
			s16, s32 := e.newPair16(dt, contig(n), func(int) float64 { return 3 * e.rng.NormFloat64() })
			dst := vspec{shape: []int{1}, strides: []int{1}, off: 5}
			d, d32 := e.newPair(backend.Float32, dst, mhFill(7)), e.newPair(backend.Float32, dst, mhFill(7))
			e.dev.SumSquares(d.dev, s16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(d32), v(s32)) })
			// TestOpsSumSquares's tolerance against the CPU: 1e-6·max(1, |want|).
			w.add(e.mhCheck32(what, d, d32, func(x float64) float64 { return 1e-6 * max(1, math.Abs(x)) }))
			// Against a float64 sum of the 16-bit values: within about half
			// a float32 ulp (the sum is compensated and the squares exact).
			h := make([]float32, s32.n)
			e.ref.Read(s32.ref.Buf, h)
			var want float64
			for _, x := range h[:n] {
				want += float64(x) * float64(x)
			}
			got := make([]float32, d.n)
			e.dev.Read(d.dev.Buf, got)
			rel := math.Abs(float64(got[5])-want) / max(want, 1e-30)
			worstRel = max(worstRel, rel)
			if rel > 6e-8 {
				t.Errorf("%s: %g, float64 sum %g (rel %.2e)", what, got[5], want, rel)
			}
		}
		t.Logf("sum_squares %-8v worst |err| vs the CPU %.2e (%.2f of the bound); worst relative error vs a float64 sum %.2e (bound 6e-8)",
			dt, w.err, w.ofBound, worstRel)
	}
}

func TestMiscHalfSwiGLU(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var wy, wa, wb mhWorst
		for _, n := range []int{1, 1000, 4099} {
			what := fmt.Sprintf("swiglu %v n=%d", dt, n)
			a16, a32 := e.newPair16(dt, contig(n), func(int) float64 { return 6 * e.rng.NormFloat64() })
			b16, b32 := e.newPair16(dt, contig(n), func(int) float64 { return 2 * e.rng.NormFloat64() })
			g16, g32 := e.newPair16(dt, contig(n), e.normal)
			y16, y32 := e.newPair16(dt, contig(n), mhFill(7))
			da16, da32 := e.newPair16(dt, contig(n), mhFill(7))
			db16, db32 := e.newPair16(dt, contig(n), mhFill(7))
			e.dev.SwiGLU(y16.dev, a16.dev, b16.dev)
			e.dev.SwiGLUBackward(da16.dev, db16.dev, a16.dev, b16.dev, g16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.SwiGLU(v(y32), v(a32), v(b32))
				be.SwiGLUBackward(v(da32), v(db32), v(a32), v(b32), v(g32))
			})
			wy.add(e.mhCheck16(what+" y", y16, y32, mhAbs))
			wa.add(e.mhCheck16(what+" da", da16, da32, mhAbs))
			wb.add(e.mhCheck16(what+" db", db16, db32, mhAbs))
		}
		t.Logf("swiglu %-8v worst ulp16 (fraction of the bound): y %.2f (%.2f), da %.2f (%.2f), db %.2f (%.2f)",
			dt, wy.err, wy.ofBound, wa.err, wa.ofBound, wb.err, wb.ofBound)
	}
}

func TestMiscHalfRoPE(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var w mhWorst
		for _, c := range []struct {
			shape []int
			pos0  int
			theta float64
		}{
			{[]int{2, 5, 6}, 3, 10000},
			{[]int{3, 7, 64}, 5000, 10000}, // large angles
			{[]int{1, 33, 34}, 0, 500000},
			{[]int{4, 1, 2}, 17, 10},
			{[]int{2, 3, 4, 8}, 1, 10000},
			{[]int{2, 4, 16}, -5, 10000}, // negative positions
		} {
			for _, inverse := range []bool{false, true} {
				what := fmt.Sprintf("rope %v %v pos0 %d theta %v inverse %v", dt, c.shape, c.pos0, c.theta, inverse)
				x16, x32 := e.newPair16(dt, contig(c.shape...), e.normal)
				y16, y32 := e.newPair16(dt, contig(c.shape...), mhFill(7))
				e.dev.RoPE(y16.dev, x16.dev, c.pos0, c.theta, inverse)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(y32), v(x32), c.pos0, c.theta, inverse) })
				w.add(e.mhCheck16(what, y16, y32, mhAbs))
				// In place.
				e.dev.RoPE(x16.dev, x16.dev, c.pos0, c.theta, inverse)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(x32), v(x32), c.pos0, c.theta, inverse) })
				w.add(e.mhCheck16(what+" in place", x16, x32, mhAbs))
			}
		}
		// Strided x: heads of a fused QKV projection, a broadcast batch,
		// more row axes than the kernel indexes (a contiguous copy first),
		// rank 2 with an offset.
		strided := func(what string, xs vspec, pos0 int, inverse bool) {
			xs = xs.full()
			x16, x32 := e.newPair16(dt, xs, e.normal)
			y16, y32 := e.newPair16(dt, contig(xs.shape...), mhFill(7))
			e.dev.RoPEStrided(y16.dev, x16.dev, pos0, 10000, inverse)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.(backend.StridedRoPE).RoPEStrided(v(y32), v(x32), pos0, 10000, inverse)
			})
			w.add(e.mhCheck16(fmt.Sprintf("rope strided %v %s inverse %v", dt, what, inverse), y16, y32, mhAbs))
		}
		for _, c := range [][4]int{{2, 5, 3, 8}, {1, 17, 4, 64}, {3, 1, 2, 2}} {
			for which := 0; which < 2; which++ {
				_, head := nfQKVHead(c[0], c[1], c[2], c[3], which)
				for _, inverse := range []bool{false, true} {
					strided(fmt.Sprintf("qkv %v head %d", c, which), head, 2, inverse)
				}
			}
		}
		strided("broadcast batch", vspec{shape: []int{3, 5, 8}, strides: []int{0, 8, 1}, off: 2}, 4, false)
		md := manyDims()
		md.shape = append(md.shape, 4)
		for i := range md.strides {
			md.strides[i] *= 4
		}
		md.strides = append(md.strides, 1)
		strided("many dims", md, 4, false)
		strided("rank 2", vspec{shape: []int{5, 6}, strides: []int{10, 1}, off: 1}, 0, true)
		t.Logf("rope %-8v worst %.2f ulp16 (%.2f of the bound)", dt, w.err, w.ofBound)
	}
}

// TestMiscHalfSchedules runs every float16 and bfloat16 kernel of this file
// under the emulator's forward, reverse and random thread schedules: the
// results must agree bit for bit.
func TestMiscHalfSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(9, 10))
	const n = 3*sumSqBlock/2 + 5
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(3 * gen.NormFloat64())
	}
	tg := make([]int32, 6)
	for i := range tg {
		tg[i] = int32(gen.IntN(1000))
	}
	tg[3] = -1 // ignored
	var labels []string
	run := func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		dev := e.dev
		v := func(b backend.Buffer, off int, shape ...int) backend.View {
			return backend.View{Buf: b, Offset: off, Shape: shape, Strides: backend.ContiguousStrides(shape)}
		}
		read := func(what string, b backend.Buffer, k int) {
			bits := make([]uint32, k)
			switch b.DType() {
			case backend.Float32:
				h := make([]float32, k)
				dev.Read(b, h)
				for i, x := range h {
					bits[i] = math.Float32bits(x)
				}
			case backend.Int32:
				h := make([]int32, k)
				dev.Read(b, h)
				for i, x := range h {
					bits[i] = uint32(x)
				}
			default:
				h := make([]uint16, k)
				dev.Read(b, h)
				for i, x := range h {
					bits[i] = uint32(x)
				}
			}
			outs = append(outs, bits)
			labels = append(labels, what)
		}
		targets := dev.Alloc(backend.Int32, len(tg))
		dev.Write(targets, tg)
		for _, dt := range halfTypes {
			x := dev.Alloc(dt, n)
			bits := make([]uint16, n)
			for i, f := range host {
				bits[i] = narrow16(dt, f)
			}
			dev.Write(x, bits)
			for _, log := range []bool{false, true} {
				y, dx := dev.Alloc(dt, 16*300), dev.Alloc(dt, 16*300)
				dev.Softmax(v(y, 0, 16, 300), v(x, 0, 16, 300), log)
				dev.SoftmaxBackward(v(dx, 0, 16, 300), v(y, 0, 16, 300), v(x, 7, 16, 300), log)
				read(fmt.Sprintf("softmax %v log=%v", dt, log), y, 16*300)
				read(fmt.Sprintf("softmax_backward %v log=%v", dt, log), dx, 16*300)
			}
			loss, lse, dl := dev.Alloc(backend.Float32, 6), dev.Alloc(backend.Float32, 6), dev.Alloc(dt, 6*1000)
			dev.CrossEntropy(v(loss, 0, 6), v(lse, 0, 6), v(x, 0, 6, 1000), v(targets, 0, 6), -1)
			dev.CrossEntropyBackward(v(dl, 0, 6, 1000), v(x, 0, 6, 1000), v(lse, 0, 6), v(targets, 0, 6), -1, 0.125)
			read(fmt.Sprintf("cross_entropy %v loss", dt), loss, 6)
			read(fmt.Sprintf("cross_entropy %v lse", dt), lse, 6)
			read(fmt.Sprintf("cross_entropy_backward %v", dt), dl, 6*1000)
			for _, op := range []backend.ReduceOp{backend.ReduceSum, backend.ReduceMax, backend.ReduceArgMin} {
				for _, sh := range [][]int{{5000}, {100, 50}} {
					kept := sh[:len(sh)-1]
					nout := 5000 / sh[len(sh)-1]
					outs32 := []backend.DType{backend.Float32, dt}
					if op == backend.ReduceArgMin {
						outs32 = []backend.DType{backend.Int32}
					}
					for _, odt := range outs32 {
						d := dev.Alloc(odt, nout)
						dev.Reduce(op, v(d, 0, kept...), v(x, 0, sh...), 1)
						read(fmt.Sprintf("reduce %v %v %v into %v", dt, op, sh, odt), d, nout)
					}
				}
			}
			s := dev.Alloc(backend.Float32, 2)
			dev.Write(s, []float32{0, 0})
			dev.SumSquares(v(s, 1, 1), v(x, 0, n))
			read(fmt.Sprintf("sum_squares %v", dt), s, 2)
			y, da, db := dev.Alloc(dt, 5000), dev.Alloc(dt, 5000), dev.Alloc(dt, 5000)
			dev.SwiGLU(v(y, 0, 5000), v(x, 0, 5000), v(x, 1, 5000))
			dev.SwiGLUBackward(v(da, 0, 5000), v(db, 0, 5000), v(x, 0, 5000), v(x, 1, 5000), v(x, 2, 5000))
			read(fmt.Sprintf("swiglu %v", dt), y, 5000)
			read(fmt.Sprintf("swiglu_backward %v da", dt), da, 5000)
			read(fmt.Sprintf("swiglu_backward %v db", dt), db, 5000)
			r := dev.Alloc(dt, 4*10*32)
			dev.RoPE(v(r, 0, 4, 10, 32), v(x, 0, 4, 10, 32), 9, 10000, false)
			read(fmt.Sprintf("rope %v", dt), r, 4*10*32)
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestMiscHalfRefused: the dtype combinations outside the contract panic
// with a message naming the kernel and the dtypes.
func TestMiscHalfRefused(t *testing.T) {
	e := newOpsEnv(t)
	h, _ := e.newPair16(backend.Float16, contig(2, 4), e.normal)
	bf, _ := e.newPair16(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	h2, _ := e.newPair16(backend.Float16, contig(2), e.normal)
	bf2, _ := e.newPair16(backend.BFloat16, contig(2), e.normal)
	f2 := e.newPair(backend.Float32, contig(2), e.normal)
	i2 := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	h1, _ := e.newPair16(backend.Float16, contig(1), e.normal)
	f1 := e.newPair(backend.Float32, contig(1), e.normal)
	for _, c := range []struct {
		name string
		fn   func()
		want []string // substrings of the panic message
	}{
		{"softmax f16←bf16", func() { e.dev.Softmax(h.dev, bf.dev, false) }, []string{"softmax_f32", "float16", "bfloat16"}},
		{"softmax f32←f16", func() { e.dev.Softmax(f.dev, h.dev, true) }, []string{"softmax_f32", "float32", "float16"}},
		{"softmax_backward mixed", func() { e.dev.SoftmaxBackward(h.dev, h.dev, bf.dev, false) }, []string{"softmax_backward_f32", "float16", "bfloat16"}},
		{"cross_entropy f16 loss", func() { e.dev.CrossEntropy(h2.dev, f2.dev, h.dev, i2.dev, -1) }, []string{"cross_entropy_f32", "float16"}},
		{"cross_entropy bf16 lse", func() { e.dev.CrossEntropy(f2.dev, bf2.dev, bf.dev, i2.dev, -1) }, []string{"cross_entropy_f32", "bfloat16"}},
		{"cross_entropy f16 targets", func() { e.dev.CrossEntropy(f2.dev, f2.dev, h.dev, h2.dev, -1) }, []string{"cross_entropy_f32", "float16"}},
		{"cross_entropy_backward bf16 dlogits of f16", func() { e.dev.CrossEntropyBackward(bf.dev, h.dev, f2.dev, i2.dev, -1, 1) },
			[]string{"cross_entropy_backward_f32", "bfloat16", "float16"}},
		{"cross_entropy_backward f32 dlogits of bf16", func() { e.dev.CrossEntropyBackward(f.dev, bf.dev, f2.dev, i2.dev, -1, 1) },
			[]string{"cross_entropy_backward_f32", "float32", "bfloat16"}},
		{"cross_entropy_backward f16 lse", func() { e.dev.CrossEntropyBackward(h.dev, h.dev, h2.dev, i2.dev, -1, 1) },
			[]string{"cross_entropy_backward_f32", "float16"}},
		{"reduce f16 into bf16", func() { e.dev.Reduce(backend.ReduceSum, bf2.dev, h.dev, 1) }, []string{"reduce_f16_f32", "float16", "bfloat16"}},
		{"reduce f32 into f16", func() { e.dev.Reduce(backend.ReduceMax, h2.dev, f.dev, 1) }, []string{"reduce_f32", "float32", "float16"}},
		{"reduce bf16 into int32", func() { e.dev.Reduce(backend.ReduceMin, i2.dev, bf.dev, 1) }, []string{"reduce_bf16_f32", "int32"}},
		{"argmax of f16 into f16", func() { e.dev.Reduce(backend.ReduceArgMax, h2.dev, h.dev, 1) }, []string{"reduce_f16_f32", "int32", "float16"}},
		{"reduce int32", func() { e.dev.Reduce(backend.ReduceSum, i2.dev, i2.dev, 1) }, []string{"reduce_f32", "int32"}},
		{"sum_squares f16 into f16", func() { e.dev.SumSquares(h1.dev, h.dev) }, []string{"sum_squares_f32", "float16"}},
		{"sum_squares bf16 into f16", func() { e.dev.SumSquares(h1.dev, bf.dev) }, []string{"sum_squares_f32", "float16"}},
		{"sum_squares int32", func() { e.dev.SumSquares(f1.dev, i2.dev) }, []string{"sum_squares_f32", "int32"}},
		{"swiglu mixed", func() { e.dev.SwiGLU(h.dev, h.dev, bf.dev) }, []string{"swiglu_f32", "float16", "bfloat16"}},
		{"swiglu f32←f16", func() { e.dev.SwiGLU(f.dev, h.dev, h.dev) }, []string{"swiglu_f32", "float32", "float16"}},
		{"swiglu_backward mixed", func() { e.dev.SwiGLUBackward(bf.dev, bf.dev, bf.dev, bf.dev, f.dev) }, []string{"swiglu_backward_f32", "bfloat16", "float32"}},
		{"rope f16←bf16", func() { e.dev.RoPE(h.dev, bf.dev, 0, 10000, false) }, []string{"rope_f32", "float16", "bfloat16"}},
		{"rope strided f32←f16", func() { e.dev.RoPEStrided(f.dev, h.dev, 0, 10000, false) }, []string{"rope_f32", "float32", "float16"}},
	} {
		msg := opsPanic(c.fn)
		if !strings.HasPrefix(msg, "metal: ") {
			t.Errorf("%s: panic %q, want a metal: … message", c.name, msg)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: panic %q does not name %s", c.name, msg, w)
			}
		}
	}
}

// TestMiscHalfKernelNames checks that every kernel these ops launch is
// defined in the embedded sources.
func TestMiscHalfKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	names := append(append(append([]string(nil), reduceKernels...), crossEntropyKernels...), fusedHalfKernels...)
	for _, dt := range floatTypes {
		names = append(names, kRoPEBy[dt], kSwiGLUBy[dt], kSwiGLUBackBy[dt], kSumSquaresBy[dt])
	}
	for _, k := range names {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}
