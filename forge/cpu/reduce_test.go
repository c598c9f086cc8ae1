package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// rdRef is the float64 reference of Reduce: for each output (row-major over
// the kept dims) it walks the reduced dims in row-major order.
func rdRef(op backend.ReduceOp, src ewTensor, nred int) []float64 {
	k := len(src.v.Shape) - nred
	kept, red := src.v.Shape[:k], src.v.Shape[k:]
	var out []float64
	idx := make([]int, len(src.v.Shape))
	ewForIndex(kept, func(ki []int) {
		copy(idx, ki)
		acc, best, bi, r := 0.0, 0.0, 0, 0
		ewForIndex(red, func(ri []int) {
			copy(idx[k:], ri)
			v := src.at(idx)
			switch op {
			case backend.ReduceSum:
				acc += v
			default:
				better := false
				switch {
				case r == 0:
					better = true
				case math.IsNaN(best):
				case math.IsNaN(v):
					better = true
				case op == backend.ReduceMax || op == backend.ReduceArgMax:
					better = v > best
				default:
					better = v < best
				}
				if better {
					best, bi = v, r
				}
			}
			r++
		})
		switch op {
		case backend.ReduceSum:
			out = append(out, acc)
		case backend.ReduceMax, backend.ReduceMin:
			out = append(out, best)
		default:
			out = append(out, float64(bi))
		}
	})
	return out
}

// rdCase is one Reduce test: a shape, a layout kind, the broadcast mask for
// ewBcast, and nred.
type rdCase struct {
	shape []int
	kind  ewKind
	bcast []bool
	nred  int
}

func (c rdCase) String() string {
	return fmt.Sprintf("%v/%v%v/nred=%d", c.shape, c.kind, c.bcast, c.nred)
}

// rdCases covers scalars, nred = 0, size-1 dims, odd sizes, transposed
// views (including the (C, N) view of a contiguous (N, C) tensor that bias
// gradients produce), broadcast sources, gaps, flips, and sizes that take
// each parallel path.
func rdCases() []rdCase {
	cs := []rdCase{
		{shape: []int{}, nred: 0},
		{shape: []int{1}, nred: 1},
		{shape: []int{7}, nred: 1},
		{shape: []int{33}, nred: 0},
		{shape: []int{1000}, nred: 1},
		{shape: []int{4, 7}, nred: 1},
		{shape: []int{4, 7}, nred: 2},
		{shape: []int{3, 1, 5}, nred: 2},
		{shape: []int{3, 1, 5}, nred: 1},
		{shape: []int{5, 1}, nred: 1},
		{shape: []int{1, 5}, nred: 1},
		{shape: []int{7, 33, 5}, nred: 2},
		{shape: []int{2, 3, 4, 5}, nred: 3},
		{shape: []int{2, 3, 4, 5}, nred: 2},
		{shape: []int{0, 5}, nred: 1}, // no outputs
	}
	var out []rdCase
	for _, c := range cs {
		for _, k := range []ewKind{ewContig, ewPerm, ewGapped, ewFlipped, ewBcast} {
			c.kind = k
			if k == ewBcast {
				c.bcast = ewBcastMask(c.shape, 0)
			}
			out = append(out, c)
		}
	}
	return append(out,
		rdCase{shape: []int{33, 1000}, kind: ewPerm, nred: 1},    // bias grad of (1000, 33): outer
		rdCase{shape: []int{1000, 33}, kind: ewPerm, nred: 1},    // column sums of (33, 1000)
		rdCase{shape: []int{7, 5, 33}, kind: ewPerm, nred: 2},    // outer with 2 reduced dims
		rdCase{shape: []int{3000, 77}, kind: ewPerm, nred: 1},    // outer, output-parallel
		rdCase{shape: []int{300, 1000}, kind: ewContig, nred: 1}, // rows, output-parallel
		rdCase{shape: []int{5, 40000}, kind: ewContig, nred: 1},  // rows, few outputs: split
		rdCase{shape: []int{3, 7, 3001}, kind: ewGapped, nred: 2},
		rdCase{shape: []int{100003}, kind: ewContig, nred: 1}, // full, split
		rdCase{shape: []int{9, 30000}, kind: ewPerm, nred: 1}, // outer, few outputs: split
		rdCase{shape: []int{40, 3000}, kind: ewBcast, bcast: []bool{false, true}, nred: 1},
		rdCase{shape: []int{3000, 40}, kind: ewBcast, bcast: []bool{true, false}, nred: 1},
		rdCase{shape: []int{11, 13, 17, 3}, kind: ewFlipped, nred: 3},
	)
}

func TestReduceMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, workers := range []int{1, 3} {
		b := ewBackend(workers)
		for _, dt := range ewDTypes {
			for _, c := range rdCases() {
				// Two data sets: continuous values, and small integers so that
				// maxima tie and "first occurrence" matters.
				for _, ties := range []bool{false, true} {
					gen := func() float64 { return 4*rng.Float64() - 2 }
					if ties {
						gen = func() float64 { return float64(rng.Intn(3)) }
					}
					src := ewMake(b, rng, dt, c.shape, c.kind, c.bcast, gen)
					for op := backend.ReduceSum; op < backend.NumReduceOps; op++ {
						rdCheck(t, b, fmt.Sprintf("w%d/%v/%v/%v/ties=%v", workers, dt, op, c, ties), op, src, c.nred)
					}
				}
			}
		}
	}
}

// rdCheck runs Reduce into a dst at an offset and compares with rdRef.
func rdCheck(t *testing.T, b *Backend, name string, op backend.ReduceOp, src ewTensor, nred int) {
	t.Helper()
	want := rdRef(op, src, nred)
	ddt := src.v.DType()
	if op == backend.ReduceArgMax || op == backend.ReduceArgMin {
		ddt = backend.Int32
	}
	const off = 2
	dbuf := b.Alloc(ddt, off+len(want)+1)
	b.Fill(backend.View{Buf: dbuf, Shape: []int{dbuf.Len()}, Strides: []int{1}}, -9)
	k := len(src.v.Shape) - nred
	kept := append([]int(nil), src.v.Shape[:k]...)
	dst := backend.View{Buf: dbuf, Offset: off, Shape: kept, Strides: backend.ContiguousStrides(kept)}
	b.Reduce(op, dst, src.v, nred)
	got := readAll(b, dbuf)
	if got[0] != -9 || got[1] != -9 || got[len(got)-1] != -9 {
		t.Errorf("%s: wrote outside dst: %v … %v", name, got[:off], got[len(got)-1])
	}
	// Sums: float64 in a different order; the error bound scales with Σ|x|.
	absSum := rdRef(backend.ReduceSum, ewTensor{v: src.v, host: rdAbs(src.host)}, nred)
	bad := 0
	for i, w := range want {
		g := got[off+i]
		ok := false
		switch op {
		case backend.ReduceSum:
			ok = ewClose(g, ewRound(ddt, w), ewTol(ddt), 1e-14*absSum[i])
		default:
			ok = ewClose(g, w, 0, 0)
		}
		if !ok {
			if bad < 3 {
				t.Errorf("%s: output %d = %v, want %v", name, i, g, w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs wrong", name, bad, len(want))
	}
}

func rdAbs(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = math.Abs(v)
	}
	return out
}

// TestReduceNaN checks that Max/Min propagate NaN and ArgMax/ArgMin report
// the first NaN, on every path (rows, outer, split).
func TestReduceNaN(t *testing.T) {
	rng := rand.New(rand.NewSource(12))
	for _, c := range []rdCase{
		{shape: []int{6, 50}, kind: ewContig, nred: 1},
		{shape: []int{4, 200000}, kind: ewContig, nred: 1}, // split rows
		{shape: []int{50, 40}, kind: ewPerm, nred: 1},      // outer
		{shape: []int{5, 100000}, kind: ewPerm, nred: 1},   // outer, split
		{shape: []int{2000, 300}, kind: ewPerm, nred: 1},   // outer, output-parallel
		{shape: []int{3, 4, 5}, kind: ewFlipped, nred: 2},
	} {
		for _, workers := range []int{1, 2, 3} {
			b := ewBackend(workers)
			for _, dt := range ewDTypes {
				src := ewMake(b, rng, dt, c.shape, c.kind, nil, func() float64 {
					if rng.Intn(40) == 0 {
						return math.NaN()
					}
					return float64(rng.Intn(9))
				})
				for op := backend.ReduceMax; op < backend.NumReduceOps; op++ {
					rdCheck(t, b, fmt.Sprintf("w%d/%v/%v/%v", workers, dt, op, c), op, src, c.nred)
				}
			}
		}
	}
}

// TestReduceLateNaN puts each output's only NaN in the last quarter of its
// reduced extent, so in the split paths it lies in a later part than the
// maximum and the merge has to carry it.
func TestReduceLateNaN(t *testing.T) {
	rng := rand.New(rand.NewSource(14))
	for _, c := range []rdCase{
		{shape: []int{3, 200000}, kind: ewContig, nred: 1}, // split rows
		{shape: []int{5, 100000}, kind: ewPerm, nred: 1},   // outer, split
		{shape: []int{400000}, kind: ewGapped, nred: 1},    // full, split
	} {
		for _, workers := range []int{1, 2, 3} {
			b := ewBackend(workers)
			for _, dt := range ewDTypes {
				src := ewMake(b, rng, dt, c.shape, c.kind, nil, func() float64 { return rng.Float64() })
				k := len(c.shape) - c.nred
				nr := 1
				for _, d := range c.shape[k:] {
					nr *= d
				}
				o := 0
				ewForIndex(c.shape[:k], func(ki []int) {
					idx := append(append([]int(nil), ki...), make([]int, c.nred)...)
					r := nr*3/4 + o
					for d := len(c.shape) - 1; d >= k; d-- {
						idx[d] = r % c.shape[d]
						r /= c.shape[d]
					}
					src.host[ewOffset(src.v, idx)] = math.NaN()
					o++
				})
				ewWrite(b, src.v.Buf, src.host)
				for op := backend.ReduceMax; op < backend.NumReduceOps; op++ {
					rdCheck(t, b, fmt.Sprintf("w%d/%v/%v/%v", workers, dt, op, c), op, src, c.nred)
				}
			}
		}
	}
}

// TestReduceSumAccuracy sums 10⁶ float32 values with a large common offset,
// where float32 accumulation would be off by percent, and requires 1e-6
// relative agreement with a float64 reference, on every path.
func TestReduceSumAccuracy(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	gen := func() float64 { return 1000 + rng.Float64() }
	for _, c := range []rdCase{
		{shape: []int{1000000}, kind: ewContig, nred: 1},
		{shape: []int{1000000}, kind: ewGapped, nred: 1},
		{shape: []int{1000, 1000}, kind: ewPerm, nred: 2},
		{shape: []int{4, 250000}, kind: ewPerm, nred: 1}, // outer: 4 columns
		{shape: []int{2, 500000}, kind: ewContig, nred: 1},
	} {
		for _, workers := range []int{1, 2} {
			b := ewBackend(workers)
			src := ewMake(b, rng, backend.Float32, c.shape, c.kind, nil, gen)
			want := rdRef(backend.ReduceSum, src, c.nred)
			k := len(c.shape) - c.nred
			dst := backend.View{Buf: b.Alloc(backend.Float32, len(want)), Shape: c.shape[:k], Strides: backend.ContiguousStrides(c.shape[:k])}
			b.Reduce(backend.ReduceSum, dst, src.v, c.nred)
			got := readAll(b, dst.Buf)
			for i := range want {
				if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-6 {
					t.Errorf("w%d/%v: sum %d = %v, want %v (rel %.2g)", workers, c, i, got[i], want[i], rel)
				}
			}
		}
	}
}

// TestReducePlan checks that the common cases take the intended path.
func TestReducePlan(t *testing.T) {
	b := ewBackend(2)
	mk := func(shape, strides []int) backend.View {
		return backend.View{Buf: b.Alloc(backend.Float32, 1), Shape: shape, Strides: strides}
	}
	const N, C = 4096, 768
	cases := []struct {
		name   string
		v      backend.View
		nred   int
		outer  bool
		splits bool
		op     backend.ReduceOp
	}{
		// Outer reductions split the rows between workers unless each worker
		// would get at least minOuterOutputsPerWorker columns.
		{"bias grad (C, N) view of (N, C)", mk([]int{C, N}, []int{1, C}), 1, true, true, backend.ReduceSum},
		{"bias grad, few channels", mk([]int{8, N * 16}, []int{1, 8}), 1, true, true, backend.ReduceSum},
		{"very wide outer", mk([]int{1 << 18, 8}, []int{1, 1 << 18}), 1, true, false, backend.ReduceSum},
		{"sum over B of (B, T, C) as (T, C, B)", mk([]int{64, C, 32}, []int{C, 1, 64 * C}), 1, true, true, backend.ReduceSum},
		{"middle axis (A, C, B) of (A, B, C)", mk([]int{16, C, 64}, []int{64 * C, 1, C}), 1, true, true, backend.ReduceSum},
		{"rows (N, C)", mk([]int{N, C}, []int{C, 1}), 1, false, false, backend.ReduceSum},
		{"rows of a transposed view", mk([]int{C, N}, []int{1, C}), 0, false, false, backend.ReduceSum},
		{"full reduction", mk([]int{N * C}, []int{1}), 1, false, true, backend.ReduceSum},
		{"full reduction of a transposed view", mk([]int{C, N}, []int{1, C}), 2, false, true, backend.ReduceSum},
		{"argmax over a transposed view", mk([]int{8, C, N}, []int{C * N, 1, C}), 2, false, false, backend.ReduceArgMax},
	}
	for _, c := range cases {
		p := planReduce(c.op, c.v, c.nred, b.workers)
		// Sum, Max and Min walk the reduced dims in memory order, so the
		// transposed full reduction is one contiguous run; ArgMax keeps the
		// logical order.
		contiguous := len(p.red.shape) == 1 && p.red.strides[0][0] == 1
		if c.name == "full reduction of a transposed view" && !contiguous {
			t.Errorf("%s: reduced layout %v %v, want one contiguous run", c.name, p.red.shape, p.red.strides)
		}
		if c.op == backend.ReduceArgMax && len(p.red.shape) != 2 {
			t.Errorf("%s: reduced layout %v, want the logical 2 dims", c.name, p.red.shape)
		}
		if p.outer != c.outer || (p.parts > 1) != c.splits {
			t.Errorf("%s: outer=%v parts=%d, want outer=%v split=%v", c.name, p.outer, p.parts, c.outer, c.splits)
		}
	}
}

func TestReduceEmpty(t *testing.T) {
	b := ewBackend(1)
	src := backend.View{Buf: b.Alloc(backend.Float32, 1), Shape: []int{3, 0}, Strides: []int{0, 1}}
	dst := backend.View{Buf: b.Alloc(backend.Float32, 3), Shape: []int{3}, Strides: []int{1}}
	b.Write(dst.Buf, []float32{5, 5, 5})
	b.Reduce(backend.ReduceSum, dst, src, 1)
	got := readAll(b, dst.Buf)
	if got[0] != 0 || got[1] != 0 || got[2] != 0 {
		t.Errorf("sum over an empty extent = %v, want zeros", got)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("max over an empty extent did not panic")
		}
	}()
	b.Reduce(backend.ReduceMax, dst, src, 1)
}

// ---------------------------------------------------------------------------
// Benchmarks

func BenchmarkReduceSum(bb *testing.B) {
	b := New()
	const N, C = 16384, 1024
	buf := b.Alloc(backend.Float32, N*C)
	host := make([]float32, N*C)
	for i := range host {
		host[i] = float32(i % 77)
	}
	b.Write(buf, host)
	for _, c := range []struct {
		name           string
		shape, strides []int
		nout           int
	}{
		{"rows_16384x1024", []int{N, C}, []int{C, 1}, N},
		{"bias_grad_16384x1024", []int{C, N}, []int{1, C}, C},
		{"full_16M", []int{N * C}, []int{1}, 1},
		{"bias_grad_2048x8192", []int{8 * C, N / 8}, []int{1, 8 * C}, 8 * C},
		{"bias_grad_21845x768", []int{768, N * C / 768}, []int{1, 768}, 768},
	} {
		src := backend.View{Buf: buf, Shape: c.shape, Strides: c.strides}
		dst := backend.View{Buf: b.Alloc(backend.Float32, c.nout), Shape: c.shape[:len(c.shape)-1], Strides: backend.ContiguousStrides(c.shape[:len(c.shape)-1])}
		bb.Run(c.name, func(bb *testing.B) {
			bb.SetBytes(4 * N * C)
			for bb.Loop() {
				b.Reduce(backend.ReduceSum, dst, src, 1)
			}
		})
	}
	// The bias-gradient view walked per output (the rows path forced), to
	// show what the outer path saves.
	bb.Run("bias_grad_16384x1024_per_output", func(bb *testing.B) {
		src := backend.View{Buf: buf, Shape: []int{C, N}, Strides: []int{1, C}}
		p := planReduce(backend.ReduceSum, src, 1, b.workers)
		p.outer = false
		x := wholeFloats[float32](src)
		bb.SetBytes(4 * N * C)
		for bb.Loop() {
			b.parallelFor(p.nout, p.nr, func(lo, hi int) {
				a := newReduceAcc(backend.ReduceSum, hi-lo)
				reduceBlock(&p, backend.ReduceSum, x, lo, hi, 0, p.nr, a)
			})
		}
	})
}
