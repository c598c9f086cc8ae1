package metal

// RoPE and RoPEStrided (ops_rope.go) against the CPU backend: large, far
// and negative positions, table growth while decoding, in place, the
// inverse, strided heads of a fused QKV projection, broadcast batches,
// more row axes than the kernel indexes; float16 and bfloat16 against the
// float32 kernel on the widened inputs and the CPU (check16,
// ops_layout_test.go, at opsTol); bit-identical results across thread
// schedules; the refused dtypes.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/emu"
)

func TestOpsRoPE(t *testing.T) {
	e := newOpsEnv(t)
	worst := 0.0
	for _, c := range []struct {
		shape []int
		pos0  int
		theta float64
	}{
		{[]int{2, 5, 6}, 3, 10000},
		{[]int{3, 7, 64}, 5000, 10000}, // large angles
		{[]int{1, 33, 128}, 0, 500000},
		{[]int{4, 1, 2}, 17, 10},
		{[]int{2, 3, 4, 8}, 1, 10000},
		{[]int{2, 3, 16}, 100000, 10000}, // far positions: a table of its own
		{[]int{2, 4, 16}, -5, 10000},     // negative positions (the backend allows them)
	} {
		for _, inverse := range []bool{false, true} {
			x := e.newPair(backend.Float32, contig(c.shape...), e.normal)
			y := e.newPair(backend.Float32, contig(c.shape...), func(int) float64 { return 7 })
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(y), v(x), c.pos0, c.theta, inverse) })
			worst = max(worst, e.compare(fmt.Sprintf("rope %v pos0 %d theta %v inverse %v", c.shape, c.pos0, c.theta, inverse), y, opsTol))
			// In place.
			e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(x), v(x), c.pos0, c.theta, inverse) })
			worst = max(worst, e.compare(fmt.Sprintf("rope in place %v inverse %v", c.shape, inverse), x, opsTol))
		}
	}
	// Decoding: one position at a time grows the table past its capacity.
	x := e.newPair(backend.Float32, contig(2, 3, 1, 16), e.normal)
	for pos := 0; pos < 200; pos += 7 {
		y := e.newPair(backend.Float32, contig(2, 3, 1, 16), func(int) float64 { return 7 })
		e.both(func(be backend.Backend, v func(pair) backend.View) { be.RoPE(v(y), v(x), pos, 10000, false) })
		worst = max(worst, e.compare(fmt.Sprintf("rope decode pos %d", pos), y, opsTol))
	}
	// Forward then inverse is the identity (to rounding).
	y := e.newPair(backend.Float32, contig(2, 9, 32), func(int) float64 { return 7 })
	z := e.newPair(backend.Float32, contig(2, 9, 32), func(int) float64 { return 7 })
	x2 := e.newPair(backend.Float32, contig(2, 9, 32), e.normal)
	e.dev.RoPE(y.dev, x2.dev, 11, 10000, false)
	e.dev.RoPE(z.dev, y.dev, 11, 10000, true)
	got, _ := e.read(z)
	want, _ := e.read(x2)
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-5*max(1, math.Abs(want[i])) {
			t.Fatalf("rope then inverse: element %d: %g, want %g", i, got[i], want[i])
		}
	}
	t.Logf("rope maxdiff %.2e", worst)
}

// nfQKVHead is head view of a fused QKV projection (B, T, 3, H, D) seen as
// (B, H, T, D): which = 0 (q), 1 (k) or 2 (v), with an offset.
func nfQKVHead(b, tt, h, d, which int) (all, head vspec) {
	all = vspec{shape: []int{b, tt, 3, h, d}, off: 3}
	full := all.full()
	st := full.strides
	head = vspec{shape: []int{b, h, tt, d}, strides: []int{st[0], st[3], st[1], 1}, off: 3 + which*st[2]}
	return all, head
}

// manyDimsRows is manyDims with a contiguous last axis of d: rows of d
// over more row axes than the kernels index.
func manyDimsRows(d int) vspec {
	md := manyDims()
	md.shape = append(md.shape, d)
	for i := range md.strides {
		md.strides[i] *= d
	}
	md.strides = append(md.strides, 1)
	return md
}

func TestOpsRoPEStrided(t *testing.T) {
	e := newOpsEnv(t)
	worst := 0.0
	for _, c := range [][4]int{{2, 5, 3, 8}, {1, 17, 4, 64}, {3, 1, 2, 2}} {
		for which := 0; which < 2; which++ {
			all, head := nfQKVHead(c[0], c[1], c[2], c[3], which)
			x := e.newPair(backend.Float32, all, e.normal)
			xv := x
			hv := head.full()
			xv.dev.Shape, xv.dev.Strides, xv.dev.Offset = hv.shape, hv.strides, hv.off
			xv.ref.Shape, xv.ref.Strides, xv.ref.Offset = hv.shape, hv.strides, hv.off
			for _, inverse := range []bool{false, true} {
				y := e.newPair(backend.Float32, contig(hv.shape...), func(int) float64 { return 7 })
				e.both(func(be backend.Backend, v func(pair) backend.View) {
					be.RoPEStrided(v(y), v(xv), 2, 10000, inverse)
				})
				worst = max(worst, e.compare(fmt.Sprintf("rope strided %v which %d inverse %v", c, which, inverse), y, opsTol))
			}
		}
	}
	// More row axes than the kernel indexes (a contiguous copy first), and
	// rank 2.
	md := manyDimsRows(4)
	x := e.newPair(backend.Float32, md, e.normal)
	y := e.newPair(backend.Float32, contig(md.shape...), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.RoPEStrided(v(y), v(x), 4, 10000, false)
	})
	worst = max(worst, e.compare("rope strided many dims", y, opsTol))
	x2 := e.newPair(backend.Float32, vspec{shape: []int{5, 6}, strides: []int{10, 1}, off: 1}, e.normal)
	y2 := e.newPair(backend.Float32, contig(5, 6), func(int) float64 { return 7 })
	e.both(func(be backend.Backend, v func(pair) backend.View) {
		be.RoPEStrided(v(y2), v(x2), 0, 10000, true)
	})
	worst = max(worst, e.compare("rope strided rank 2", y2, opsTol))
	t.Logf("rope strided maxdiff %.2e", worst)
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
			{[]int{2, 3, 16}, 100000, 10000}, // far positions: a table of its own
			{[]int{2, 4, 16}, -5, 10000},     // negative positions
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
				be.RoPEStrided(v(y32), v(x32), pos0, 10000, inverse)
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

// TestOpsRoPESchedules runs RoPE and RoPEStrided (heads of a fused QKV
// projection) on float32, float16 and bfloat16 under the emulator's
// forward, reverse and random schedules: the results must agree bit for
// bit.
func TestOpsRoPESchedules(t *testing.T) {
	e := newOpsEnv(t)
	drv, ok := e.dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", e.dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	gen := rand.New(rand.NewPCG(5, 6))
	in := make([]float32, 2*17*3*4*64+3)
	for i := range in {
		in[i] = float32(gen.NormFloat64())
	}
	_, head := nfQKVHead(2, 17, 4, 64, 1)
	head = head.full()
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
		x32 := dev.Alloc(backend.Float32, len(in))
		dev.Write(x32, in)
		for _, dt := range floatTypes {
			x := x32
			if dt.IsHalf() {
				x = dev.Alloc(dt, len(in))
				dev.Write(x, narrowAll(dt, in))
			}
			y := dev.Alloc(dt, 4*10*32)
			dev.RoPE(v(y, 0, 4, 10, 32), v(x, 0, 4, 10, 32), 9, 10000, false)
			read(fmt.Sprintf("rope %v", dt), y, 4*10*32)
			ys := dev.Alloc(dt, 2*4*17*64)
			xs := backend.View{Buf: x, Offset: head.off, Shape: head.shape, Strides: head.strides}
			dev.RoPEStrided(v(ys, 0, head.shape...), xs, 2, 10000, true)
			read(fmt.Sprintf("rope strided %v inverse", dt), ys, 2*4*17*64)
		}
		return outs
	}
	schedulesAgree(t, drv, run, func(i int) string { return labels[i] })
}

// TestOpsRoPERefused: float64 is refused with the backend's message
// (before any kernel), and mixed dtypes panic naming the kernel and the
// dtypes.
func TestOpsRoPERefused(t *testing.T) {
	refusesFloat64(t, func(b *Backend, f64 backend.View) map[string]func() {
		return map[string]func(){
			kRoPE: func() { b.RoPE(f64, f64, 0, 10000, false) },
		}
	})
	e := newOpsEnv(t)
	h := e.newPair(backend.Float16, contig(2, 4), e.normal)
	bf := e.newPair(backend.BFloat16, contig(2, 4), e.normal)
	f := e.newPair(backend.Float32, contig(2, 4), e.normal)
	wantPanic(t, "rope f16←bf16", func() { e.dev.RoPE(h.dev, bf.dev, 0, 10000, false) }, "metal: ", "rope_f32", "float16", "bfloat16")
	wantPanic(t, "rope strided f32←f16", func() { e.dev.RoPEStrided(f.dev, h.dev, 0, 10000, false) }, "metal: ", "rope_f32", "float32", "float16")
}

// TestOpsRoPEKernelNames checks that every kernel RoPE launches is
// defined in the embedded sources.
func TestOpsRoPEKernelNames(t *testing.T) {
	idx, err := kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append([]string{kRoPE}, allNames(kRoPEBy)...) {
		if _, ok := idx[k]; !ok {
			t.Errorf("kernel %s is not defined in kernels/*.metal", k)
		}
	}
}

// Emulator timings of RoPE (go test -bench OpsRoPE -run '^$' ./metal);
// they measure the emulation, not a GPU.
func BenchmarkOpsRoPE(b *testing.B) {
	dev := opsBenchDevice(b)
	q, qy := benchView(dev, 0.1, 4, 8, 128, 64), benchView(dev, 0.1, 4, 8, 128, 64)
	b.Run("rope_4x8x128x64", func(b *testing.B) {
		for b.Loop() {
			dev.RoPE(qy, q, 0, 10000, false)
			dev.Sync()
		}
	})
}
