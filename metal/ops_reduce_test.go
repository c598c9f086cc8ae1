package metal

// Reduce, Softmax and SoftmaxBackward (ops_reduce.go) against the CPU
// backend: every reduction over kept and reduced dims of every layout,
// more reduced dims than the kernel indexes, ties, NaN and infinities,
// more rows than one grid dimension holds; float16 and bfloat16 sources
// into float32 and 16-bit dsts; bit-identical results across thread
// schedules; the refused dtype combinations.
//
// Tolerances (check16, ops_layout_test.go). Every one of these kernels
// widens its 16-bit inputs exactly, computes in float32 exactly as its
// float32 instance does, and rounds each 16-bit output once. So a 16-bit
// output must be bit for bit the device's float32 kernel's output for the
// widened inputs, rounded once on the host (forge/half) — on the emulator;
// on a GPU this is logged —, and within ulp16(max(|got|, |want|))/2 +
// tol32(want) of the CPU's float32 result, with tol32 = opsTol·max(1,
// |want|) as in TestOpsSoftmax and TestOpsReduce, and 0 for max and min,
// whose results are input values. Float32 outputs computed from 16-bit
// inputs (reductions into a float32 dst) must equal the float32 kernel's
// output bit for bit (on the emulator) and lie within tol32 of the CPU's;
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

func TestOpsReduce(t *testing.T) {
	e := newOpsEnv(t)
	type rcase struct {
		src  vspec
		nred int
	}
	cases := []rcase{
		{contig(7, 13), 1},
		{contig(3, 5, 33), 2},
		{contig(5000), 1},    // one output, 1024 threads
		{contig(300, 70), 1}, // many outputs
		{vspec{shape: []int{13, 7}, strides: []int{1, 13}}, 1}, // down columns
		{vspec{shape: []int{4, 6, 5}, strides: []int{1, 20, 4}, off: 3}, 2},
		{vspec{shape: []int{4, 9}, strides: []int{0, 1}}, 1},
		{contig(4, 3), 0},
		{manyDims(), 5},
		{manyDims(), 9},
	}
	for op := backend.ReduceSum; op < backend.NumReduceOps; op++ {
		worst := 0.0
		for _, c := range cases {
			gen := e.normal
			if op != backend.ReduceSum {
				gen = func(int) float64 { return float64(e.rng.IntN(9)) } // ties
			}
			src := e.newPair(backend.Float32, c.src, gen)
			k := len(c.src.shape) - c.nred
			ddt := backend.Float32
			if op >= backend.ReduceArgMax {
				ddt = backend.Int32
			}
			dst := e.newPair(ddt, contig(c.src.shape[:k]...), func(int) float64 { return -7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(dst), v(src), c.nred) })
			worst = max(worst, e.compare(fmt.Sprintf("reduce %v %v nred %d", op, c.src, c.nred), dst, opsTol))
		}
		// NaN and infinities: max/min propagate NaN, arg ops report the first NaN.
		specials := [][]float64{
			{1, math.NaN(), 3, math.NaN()},
			{math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)},
			{2, math.Inf(1), 5, math.Inf(1)},
			{-1, -1, -1, -1},
		}
		for _, row := range specials {
			src := e.newPair(backend.Float32, contig(40, 4), func(i int) float64 { return row[i%4] })
			ddt := backend.Float32
			if op >= backend.ReduceArgMax {
				ddt = backend.Int32
			}
			dst := e.newPair(ddt, contig(40), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(op, v(dst), v(src), 1) })
			e.compare(fmt.Sprintf("reduce %v of %v", op, row), dst, opsTol)
		}
		t.Logf("reduce %-7v maxdiff %.2e", op, worst)
	}
}

func TestOpsSoftmax(t *testing.T) {
	e := newOpsEnv(t)
	for _, log := range []bool{false, true} {
		worstF, worstB := 0.0, 0.0
		for _, sh := range [][]int{{1}, {5, 7}, {3, 1000}, {2, 3, 33}, {64, 31}, {1, 4099}} {
			x := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 4 * e.rng.NormFloat64() })
			y := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), log) })
			worstF = max(worstF, e.compare(fmt.Sprintf("softmax log=%v %v", log, sh), y, opsTol))
			// The backward from the CPU's y on both (so only the backward differs).
			yh := make([]float32, y.n)
			e.ref.Read(y.ref.Buf, yh)
			yy := e.newPair(backend.Float32, contig(sh...), func(i int) float64 { return float64(yh[i]) })
			dy := e.newPair(backend.Float32, contig(sh...), e.normal)
			dx := e.newPair(backend.Float32, contig(sh...), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.SoftmaxBackward(v(dx), v(yy), v(dy), log) })
			worstB = max(worstB, e.compare(fmt.Sprintf("softmax_backward log=%v %v", log, sh), dx, opsTol))
		}
		// Rows with NaN, +Inf, only −Inf, and −Inf among finite values.
		rows := [][]float64{
			{1, math.NaN(), 2}, {1, math.Inf(1), 2}, {math.Inf(-1), math.Inf(-1), math.Inf(-1)}, {math.Inf(-1), 3, 1},
		}
		for _, r := range rows {
			x := e.newPair(backend.Float32, contig(2, 3), func(i int) float64 { return r[i%3] })
			y := e.newPair(backend.Float32, contig(2, 3), func(int) float64 { return 0 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), log) })
			e.compare(fmt.Sprintf("softmax log=%v of %v", log, r), y, opsTol)
		}
		t.Logf("softmax log=%v: forward maxdiff %.2e, backward maxdiff %.2e", log, worstF, worstB)
	}
}

// TestOpsManyRows covers more rows than one grid dimension holds (65535
// threadgroups): the row kernels spread them over a 2-D grid. float32
// against the CPU; float16 and bfloat16 against the float32 kernels on the
// widened inputs and the CPU (check16, mhCheckIndex).
func TestOpsManyRows(t *testing.T) {
	e := newOpsEnv(t)
	const rows = 65535 + 77
	x := e.newPair(backend.Float32, contig(rows, 3), e.normal)
	y := e.newPair(backend.Float32, contig(rows, 3), func(int) float64 { return 0 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y), v(x), true) })
	e.compare("log_softmax of many rows", y, opsTol)
	dx := e.newPair(backend.Float32, contig(rows, 3), func(int) float64 { return 0 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.SoftmaxBackward(v(dx), v(y), v(x), true) })
	e.compare("log_softmax backward of many rows", dx, opsTol)
	s := e.newPair(backend.Int32, contig(rows), func(int) float64 { return -1 })
	e.both(func(be backend.Backend, v func(pair) backend.View) { be.Reduce(backend.ReduceArgMax, v(s), v(x), 1) })
	e.compare("argmax of many rows", s, 0)
	for _, dt := range halfTypes {
		x16, x32 := e.newPair16(dt, contig(rows, 3), e.normal)
		y16, y32 := e.newPair16(dt, contig(rows, 3), mhFill(0))
		e.dev.Softmax(y16.dev, x16.dev, true)
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.Softmax(v(y32), v(x32), true) })
		e.check16(fmt.Sprintf("log_softmax %v of many rows", dt), y16, y32, tolOps)
		// The backward from the CPU's forward rounded to dt, dy = x.
		yh := make([]float32, y32.n)
		e.ref.Read(y32.ref.Buf, yh)
		yy16, yy32 := e.newPair16(dt, contig(rows, 3), func(i int) float64 { return float64(yh[i]) })
		dx16, dx32 := e.newPair16(dt, contig(rows, 3), mhFill(0))
		e.dev.SoftmaxBackward(dx16.dev, yy16.dev, x16.dev, true)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.SoftmaxBackward(v(dx32), v(yy32), v(x32), true)
		})
		e.check16(fmt.Sprintf("log_softmax backward %v of many rows", dt), dx16, dx32, tolOps)
		s16, s32 := e.newPair(backend.Int32, contig(rows), mhFill(-1)), e.newPair(backend.Int32, contig(rows), mhFill(-1))
		e.dev.Reduce(backend.ReduceArgMax, s16.dev, x16.dev, 1)
		e.both(func(be backend.Backend, v func(pair) backend.View) {
			be.Reduce(backend.ReduceArgMax, v(s32), v(x32), 1)
		})
		e.mhCheckIndex(fmt.Sprintf("argmax %v of many rows", dt), s16, s32)
	}
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

// TestOpsReduceSchedules runs the kernels of reduce.metal and softmax.metal
// (threadgroup memory, barriers, simdgroup reductions) on float32, float16
// and bfloat16 under the emulator's forward, reverse and random thread
// orders: the results must agree bit for bit (a missing barrier shows up
// as a result that depends on the order; a reduction whose order is not
// fixed, as one that differs).
func TestOpsReduceSchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(3, 4))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(gen.NormFloat64())
		}
		return v
	}
	in1, in2 := vals(5000), vals(64*300)
	gen = rand.New(rand.NewPCG(9, 10))
	in16 := make([]float32, 3*sumSqBlock/2+5)
	for i := range in16 {
		in16[i] = float32(3 * gen.NormFloat64())
	}
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
		up := func(h []float32) backend.Buffer {
			b := dev.Alloc(backend.Float32, len(h))
			dev.Write(b, h)
			return b
		}
		x1, x2 := up(in1), up(in2)
		for _, op := range []backend.ReduceOp{backend.ReduceSum, backend.ReduceMax, backend.ReduceArgMin} {
			for _, sh := range [][]int{{5000}, {100, 50}} {
				dt := backend.Float32
				if op == backend.ReduceArgMin {
					dt = backend.Int32
				}
				d := dev.Alloc(dt, 100)
				dev.Reduce(op, v(d, 0, sh[:len(sh)-1]...), v(x1, 0, sh...), 1)
				read(fmt.Sprintf("reduce float32 %v %v", op, sh), d, 5000/sh[len(sh)-1])
			}
		}
		for _, log := range []bool{false, true} {
			y := dev.Alloc(backend.Float32, 64*300)
			dev.Softmax(v(y, 0, 64, 300), v(x2, 0, 64, 300), log)
			dx := dev.Alloc(backend.Float32, 64*300)
			dev.SoftmaxBackward(v(dx, 0, 64, 300), v(y, 0, 64, 300), v(x2, 0, 64, 300), log)
			read(fmt.Sprintf("softmax float32 log=%v", log), y, 64*300)
			read(fmt.Sprintf("softmax_backward float32 log=%v", log), dx, 64*300)
		}
		for _, dt := range halfTypes {
			x := dev.Alloc(dt, len(in16))
			dev.Write(x, narrowAll(dt, in16))
			for _, log := range []bool{false, true} {
				y, dx := dev.Alloc(dt, 16*300), dev.Alloc(dt, 16*300)
				dev.Softmax(v(y, 0, 16, 300), v(x, 0, 16, 300), log)
				dev.SoftmaxBackward(v(dx, 0, 16, 300), v(y, 0, 16, 300), v(x, 7, 16, 300), log)
				read(fmt.Sprintf("softmax %v log=%v", dt, log), y, 16*300)
				read(fmt.Sprintf("softmax_backward %v log=%v", dt, log), dx, 16*300)
			}
			for _, op := range []backend.ReduceOp{backend.ReduceSum, backend.ReduceMax, backend.ReduceArgMin} {
				for _, sh := range [][]int{{5000}, {100, 50}} {
					kept := sh[:len(sh)-1]
					nout := 5000 / sh[len(sh)-1]
					odts := []backend.DType{backend.Float32, dt}
					if op == backend.ReduceArgMin {
						odts = []backend.DType{backend.Int32}
					}
					for _, odt := range odts {
						d := dev.Alloc(odt, nout)
						dev.Reduce(op, v(d, 0, kept...), v(x, 0, sh...), 1)
						read(fmt.Sprintf("reduce %v %v %v into %v", dt, op, sh, odt), d, nout)
					}
				}
			}
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsReduceRefused: float64 is refused with the backend's message
// (before any kernel), and the dtype combinations outside the contract
// panic with a message naming the kernel and the dtypes.
func TestOpsReduceRefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kReduce:      func() { b.Reduce(backend.ReduceSum, f64, f64, 1) },
			kSoftmax:     func() { b.Softmax(f64, f64, false) },
			kSoftmaxBack: func() { b.SoftmaxBackward(f64, f64, f64, true) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	h2 := e.newPair(backend.Float16, contig(2), e.normal)
	bf2 := e.newPair(backend.BFloat16, contig(2), e.normal)
	i2 := e.newPair(backend.Int32, contig(2), func(i int) float64 { return float64(i) })
	i4 := e.newPair(backend.Int32, contig(4), func(int) float64 { return 1 })
	r := e.newPair(backend.Float32, contig(1), e.normal)
	for _, c := range []struct {
		name string
		fn   func()
		want []string // substrings of the panic message
	}{
		{"reduce int32 into f32", func() {
			e.dev.Reduce(backend.ReduceSum, backend.View{Buf: r.dev.Buf, Shape: []int{}, Strides: []int{}}, i4.dev, 1)
		}, nil},
		{"softmax f16←bf16", func() { e.dev.Softmax(h.dev, bf.dev, false) }, []string{"softmax_f32", "float16", "bfloat16"}},
		{"softmax f32←f16", func() { e.dev.Softmax(f.dev, h.dev, true) }, []string{"softmax_f32", "float32", "float16"}},
		{"softmax_backward mixed", func() { e.dev.SoftmaxBackward(h.dev, h.dev, bf.dev, false) }, []string{"softmax_backward_f32", "float16", "bfloat16"}},
		{"reduce f16 into bf16", func() { e.dev.Reduce(backend.ReduceSum, bf2.dev, h.dev, 1) }, []string{"reduce_f16_f32", "float16", "bfloat16"}},
		{"reduce f32 into f16", func() { e.dev.Reduce(backend.ReduceMax, h2.dev, f.dev, 1) }, []string{"reduce_f32", "float32", "float16"}},
		{"reduce bf16 into int32", func() { e.dev.Reduce(backend.ReduceMin, i2.dev, bf.dev, 1) }, []string{"reduce_bf16_f32", "int32"}},
		{"argmax of f16 into f16", func() { e.dev.Reduce(backend.ReduceArgMax, h2.dev, h.dev, 1) }, []string{"reduce_f16_f32", "int32", "float16"}},
		{"reduce int32", func() { e.dev.Reduce(backend.ReduceSum, i2.dev, i2.dev, 1) }, []string{"reduce_f32", "int32"}},
	} {
		wantPanic(t, c.name, c.fn, "metal: ", c.want...)
	}
}

// TestOpsReduceKernelNames checks that every kernel these ops launch is
// defined in the embedded sources.
func TestOpsReduceKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{kReduce, kSoftmax, kSoftmaxBack}, reduceKernels...) {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings of representative launches (go test -bench OpsReduce
// -run '^$' ./metal). On the emulator they measure the emulation, not a
// GPU.
func BenchmarkOpsReduce(b *testing.B) {
	dev := opsBenchDevice(b)
	up := func(shape ...int) backend.View { return benchView(dev, 0, shape...) }
	x, y := up(64, 1024), up(64, 1024)
	b.Run("softmax_64x1024", func(b *testing.B) {
		for b.Loop() {
			dev.Softmax(y, x, false)
			dev.Sync()
		}
	})
	big, out := up(1<<20), up(1)
	b.Run("reduce_sum_1M", func(b *testing.B) {
		for b.Loop() {
			dev.Reduce(backend.ReduceSum, backend.View{Buf: out.Buf, Shape: []int{}, Strides: []int{}}, big, 1)
			dev.Sync()
		}
	})
}
