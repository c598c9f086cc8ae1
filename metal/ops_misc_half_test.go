package metal

// The float16 and bfloat16 kernels of softmax, cross-entropy, reduce,
// SumSquares, SwiGLU and RoPE on the emulator, against the device's own
// float32 kernels and the CPU backend's float32 results on the same
// rounded (widened) inputs; bit-identical results across thread schedules;
// the dtype combinations that are refused.
//
// Tolerances. Every one of these kernels widens its 16-bit inputs exactly,
// computes in float32 exactly as its float32 instance does, and rounds each
// 16-bit output once. So a 16-bit output must be (check16,
// ops_half_test.go)
//
//   - bit for bit the device's float32 kernel's output for the widened
//     inputs, rounded once on the host (forge/half) — on the emulator; on
//     a GPU, whose compiler may contract the two instances differently,
//     this is logged; and
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
// for the widened inputs bit for bit (on the emulator, as above) and lie
// within tol32 of the CPU's;
// int32 indices must equal the CPU's. NaN matches NaN (payloads aside).

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

// ceGradTol is the cross-entropy gradients' float32 tolerance (relative,
// as in TestOpsCrossEntropy).
func ceGradTol(w float64) float64 { return 2e-5*math.Abs(w) + 1e-30 }

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
			var fw, bw halfWorst
			for _, sh := range shapes {
				what := fmt.Sprintf("softmax %v log=%v %v", dt, log, sh)
				x16, x32 := e.newPair16(dt, contig(sh...), func(int) float64 { return 4 * e.rng.NormFloat64() })
				y16, y32 := e.newPair16(dt, contig(sh...), mhFill(0.5))
				e.dev.Softmax(y16.dev, x16.dev, log)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y32), v(x32), log) })
				fw.add(e.check16(what, y16, y32, tolOps))

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
				bw.add(e.check16("backward "+what, dx16, dx32, tolOps))
			}
			// Rows with NaN, +Inf, only −Inf, and −Inf among finite values.
			for _, r := range specials {
				x16, x32 := e.newPair16(dt, contig(2, 3), func(i int) float64 { return r[i%3] })
				y16, y32 := e.newPair16(dt, contig(2, 3), mhFill(0.5))
				e.dev.Softmax(y16.dev, x16.dev, log)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y32), v(x32), log) })
				e.check16(fmt.Sprintf("softmax %v log=%v of %v", dt, log, r), y16, y32, tolOps)
			}
			t.Logf("softmax %-8v log=%-5v forward worst %.2f ulp16 (%.2f of the bound), backward worst %.2f ulp16 (%.2f of the bound)",
				dt, log, fw.ulps, fw.ofBound, bw.ulps, bw.ofBound)
		}
	}
}

func TestMiscHalfCrossEntropy(t *testing.T) {
	e := newOpsEnv(t)
	const ignore = ceIgnore
	cases := []struct {
		n, v int
		kind string
	}{
		{1, 1, "normal"}, {5, 7, "normal"}, {3, 1000, "normal"}, {33, 257, "normal"},
		{9, 500, "large"}, {40, 64, "confident"}, {100, 40, "ties"},
	}
	for _, dt := range halfTypes {
		var loss, lse, grad halfWorst
		for _, c := range cases {
			tg := e.ceTargets(c.n, c.v)
			for _, ign := range []int{ignore, int(tg[0])} { // ignore a real class too
				what := fmt.Sprintf("cross_entropy %v %dx%d %s ignore %d", dt, c.n, c.v, c.kind, ign)
				targets := e.ceTargetPair(tg, ign)
				lg16, lg32 := e.newPair16(dt, contig(c.n, c.v), e.ceLogits(c.kind, c.v, tg))
				lossH, lseH := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				loss32, lse32 := e.newPair(backend.Float32, contig(c.n), mhFill(3)), e.newPair(backend.Float32, contig(c.n), mhFill(3))
				e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ign)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ign)
				})
				loss.add(e.check16(what+" loss", lossH, loss32, tolOps))
				lse.add(e.check16(what+" lse", lseH, lse32, tolOps))

				// The backward from the CPU's lse on both; then in place
				// (dlogits = logits).
				lh := make([]float32, c.n)
				e.ref.Read(lse32.ref.Buf, lh)
				lse2 := e.newPair(backend.Float32, contig(c.n), func(i int) float64 { return float64(lh[i]) })
				scale := 0.7 / float64(c.n)
				dl16, dl32 := e.newPair16(dt, contig(c.n, c.v), mhFill(3))
				e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lse2.dev, targets.dev, backend.View{}, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(dl32), v(lg32), v(lse2), v(targets), backend.View{}, ign, scale)
				})
				grad.add(e.check16(what+" backward", dl16, dl32, ceGradTol))
				e.dev.CrossEntropyBackward(lg16.dev, lg16.dev, lse2.dev, targets.dev, backend.View{}, ign, scale)
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.CrossEntropyBackward(v(lg32), v(lg32), v(lse2), v(targets), backend.View{}, ign, scale)
				})
				grad.add(e.check16(what+" backward in place", lg16, lg32, ceGradTol))
			}
		}
		// Special rows (ceSpecialRows), each with its target ignored and not.
		for _, r := range ceSpecialRows {
			what := fmt.Sprintf("cross_entropy %v of %v", dt, r)
			tg := []int32{0, ignore, 2}
			targets := e.ceTargetPair(tg, ignore)
			lg16, lg32 := e.newPair16(dt, contig(3, 4), func(i int) float64 { return r[i%4] })
			lossH, lseH := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			loss32, lse32 := e.newPair(backend.Float32, contig(3), mhFill(3)), e.newPair(backend.Float32, contig(3), mhFill(3))
			e.dev.CrossEntropy(lossH.dev, lseH.dev, lg16.dev, targets.dev, ignore)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropy(v(loss32), v(lse32), v(lg32), v(targets), ignore)
			})
			e.check16(what+" loss", lossH, loss32, tolOps)
			e.check16(what+" lse", lseH, lse32, tolOps)
			dl16, dl32 := e.newPair16(dt, contig(3, 4), mhFill(3))
			e.dev.CrossEntropyBackward(dl16.dev, lg16.dev, lseH.dev, targets.dev, backend.View{}, ignore, 0.5)
			e.both(func(be backend.Backend, v func(pair) backend.View) {
				be.CrossEntropyBackward(v(dl32), v(lg32), v(lse32), v(targets), backend.View{}, ignore, 0.5)
			})
			e.check16(what+" backward", dl16, dl32, ceGradTol)
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
		lse.add(e.check16(fmt.Sprintf("cross_entropy %v without loss, strided targets", dt), lseH, lse32, tolOps))
		nan16, nan32 := e.newPair16(dt, contig(2, 3), func(i int) float64 { return []float64{1, math.NaN(), -2, 0.5, 3, math.Inf(1)}[i] })
		lseFin := e.newPair(backend.Float32, contig(2), func(i int) float64 { return []float64{1.5, 4}[i] })
		dl16, dl32 := e.newPair16(dt, contig(2, 3), mhFill(3))
		e.dev.CrossEntropyBackward(dl16.dev, nan16.dev, lseFin.dev, targets.dev, backend.View{}, ignore, 0.25)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.CrossEntropyBackward(v(dl32), v(nan32), v(lseFin), v(targets), backend.View{}, ignore, 0.25)
		})
		e.check16(fmt.Sprintf("cross_entropy_backward %v of NaN/+Inf rows with a finite lse", dt), dl16, dl32, ceGradTol)
		t.Logf("cross_entropy %-8v loss worst |err| %.2e (%.2f of the bound), lse %.2e (%.2f); dlogits worst %.2f ulp16 (%.2f of the bound)",
			dt, loss.abs, loss.ofBound, lse.abs, lse.ofBound, grad.ulps, grad.ofBound)
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
		for op := backend.ReduceSum; op < backend.NumReduceOps; op++ {
			tol := tolOps
			if op != backend.ReduceSum {
				tol = tolScaled(0) // max and min: input values
			}
			var w16, w32 halfWorst
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
				d16 := e.newPair(dt, kept, mhFill(-7))
				e.dev.Reduce(op, df.dev, s16.dev, nred)
				e.dev.Reduce(op, d16.dev, s16.dev, nred)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(df32), v(s32), nred) })
				w32.add(e.check16(what+" into float32", df, df32, tol))
				w16.add(e.check16(fmt.Sprintf("%s into %v", what, dt), d16, df32, tol))
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
					dt, op, w32.abs, w32.ofBound, dt, w16.ulps, w16.ofBound)
			}
		}
		// A sum over nothing is 0 in either dst dtype.
		src := e.newPair(dt, contig(4, 0), e.normal)
		d16 := e.newPair(dt, contig(4), mhFill(5))
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
		var w halfWorst
		worstRel := 0.0
		for _, n := range []int{0, 1, 1000, sumSqBlock + 1, 3*sumSqBlock/2 + 77} {
			what := fmt.Sprintf("sum_squares %v n=%d", dt, n)
			s16, s32 := e.newPair16(dt, contig(n), func(int) float64 { return 3 * e.rng.NormFloat64() })
			dst := vspec{shape: []int{1}, strides: []int{1}, off: 5}
			d, d32 := e.newPair(backend.Float32, dst, mhFill(7)), e.newPair(backend.Float32, dst, mhFill(7))
			e.dev.SumSquares(d.dev, s16.dev)
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SumSquares(v(d32), v(s32)) })
			// TestOpsSumSquares's tolerance against the CPU: 1e-6·max(1, |want|).
			w.add(e.check16(what, d, d32, tolScaled(1e-6)))
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
			dt, w.abs, w.ofBound, worstRel)
	}
}

func TestMiscHalfSwiGLU(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var wy, wa, wb halfWorst
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
			wy.add(e.check16(what+" y", y16, y32, tolOps))
			wa.add(e.check16(what+" da", da16, da32, tolOps))
			wb.add(e.check16(what+" db", db16, db32, tolOps))
		}
		t.Logf("swiglu %-8v worst ulp16 (fraction of the bound): y %.2f (%.2f), da %.2f (%.2f), db %.2f (%.2f)",
			dt, wy.ulps, wy.ofBound, wa.ulps, wa.ofBound, wb.ulps, wb.ofBound)
	}
}

func TestMiscHalfRoPE(t *testing.T) {
	e := newOpsEnv(t)
	for _, dt := range halfTypes {
		var w halfWorst
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
				w.add(e.check16(what, y16, y32, tolOps))
				// In place.
				e.dev.RoPE(x16.dev, x16.dev, c.pos0, c.theta, inverse)
				e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(x32), v(x32), c.pos0, c.theta, inverse) })
				w.add(e.check16(what+" in place", x16, x32, tolOps))
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
			w.add(e.check16(fmt.Sprintf("rope strided %v %s inverse %v", dt, what, inverse), y16, y32, tolOps))
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
		strided("many dims", manyDimsRows(4), 4, false)
		strided("rank 2", vspec{shape: []int{5, 6}, strides: []int{10, 1}, off: 1}, 0, true)
		t.Logf("rope %-8v worst %.2f ulp16 (%.2f of the bound)", dt, w.ulps, w.ofBound)
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
		v := contigView
		read := func(what string, b backend.Buffer, k int) {
			outs = append(outs, readBits(dev, b, k))
			labels = append(labels, what)
		}
		targets := dev.Alloc(backend.Int32, len(tg))
		dev.Write(targets, tg)
		for _, dt := range halfTypes {
			x := dev.Alloc(dt, n)
			dev.Write(x, narrowAll(dt, host))
			for _, log := range []bool{false, true} {
				y, dx := dev.Alloc(dt, 16*300), dev.Alloc(dt, 16*300)
				dev.Softmax(v(y, 0, 16, 300), v(x, 0, 16, 300), log)
				dev.SoftmaxBackward(v(dx, 0, 16, 300), v(y, 0, 16, 300), v(x, 7, 16, 300), log)
				read(fmt.Sprintf("softmax %v log=%v", dt, log), y, 16*300)
				read(fmt.Sprintf("softmax_backward %v log=%v", dt, log), dx, 16*300)
			}
			loss, lse, dl := dev.Alloc(backend.Float32, 6), dev.Alloc(backend.Float32, 6), dev.Alloc(dt, 6*1000)
			dev.CrossEntropy(v(loss, 0, 6), v(lse, 0, 6), v(x, 0, 6, 1000), v(targets, 0, 6), -1)
			dev.CrossEntropyBackward(v(dl, 0, 6, 1000), v(x, 0, 6, 1000), v(lse, 0, 6), v(targets, 0, 6), backend.View{}, -1, 0.125)
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
	h := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	h2 := e.newPair(backend.Float16, contig(2), e.normal)
	bf2 := e.newPair(backend.BFloat16, contig(2), e.normal)
	f2 := e.newPair(backend.Float32, contig(2), e.normal)
	i2 := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	h1 := e.newPair(backend.Float16, contig(1), e.normal)
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
		{"cross_entropy_backward bf16 dlogits of f16", func() { e.dev.CrossEntropyBackward(bf.dev, h.dev, f2.dev, i2.dev, backend.View{}, -1, 1) },
			[]string{"cross_entropy_backward_f32", "bfloat16", "float16"}},
		{"cross_entropy_backward f32 dlogits of bf16", func() { e.dev.CrossEntropyBackward(f.dev, bf.dev, f2.dev, i2.dev, backend.View{}, -1, 1) },
			[]string{"cross_entropy_backward_f32", "float32", "bfloat16"}},
		{"cross_entropy_backward f16 lse", func() { e.dev.CrossEntropyBackward(h.dev, h.dev, h2.dev, i2.dev, backend.View{}, -1, 1) },
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
		wantPanic(t, c.name, c.fn, "metal: ", c.want...)
	}
}

// TestMiscHalfKernelNames checks that every kernel these ops launch is
// defined in the embedded sources.
func TestMiscHalfKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	names := append(append(append(allNames(kRoPEBy), reduceKernels...), crossEntropyKernels...), fusedKernels...)
	for _, k := range names {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}
