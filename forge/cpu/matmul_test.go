package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// matOperand describes how a test lays out one operand: batch shape and
// strides are given by the case, the matrix dims are row- or column-major
// with pad extra elements per leading-dimension step.
type matOperand struct {
	batchShape   []int
	batchStrides []int // nil: contiguous batches; 0 entries broadcast
	colMajor     bool
	pad          int
}

// makeOperand allocates a buffer holding a (batch..., rows, cols) view
// with the requested layout, filled with random values, at offset off.
func makeOperand[T Float](r *rand.Rand, op matOperand, rows, cols, off int) backend.View {
	ld := cols + op.pad
	inner := [2]int{ld, 1}
	size := rows * ld
	if op.colMajor {
		ld = rows + op.pad
		inner = [2]int{1, ld}
		size = cols * ld
	}
	nb := len(op.batchShape)
	strides := make([]int, nb+2)
	strides[nb], strides[nb+1] = inner[0], inner[1]
	extent := size
	acc := size
	for d := nb - 1; d >= 0; d-- {
		if op.batchStrides != nil {
			strides[d] = op.batchStrides[d]
		} else {
			strides[d] = acc
			acc *= op.batchShape[d]
		}
		extent += (op.batchShape[d] - 1) * strides[d]
	}
	shape := append(append([]int(nil), op.batchShape...), rows, cols)
	data := randSlice[T](r, off+extent)
	return backend.View{Buf: bufferOf(data), Offset: off, Shape: shape, Strides: strides}
}

func bufferOf[T Float](data []T) *Buffer {
	switch d := any(data).(type) {
	case []float32:
		return &Buffer{F32: d}
	default:
		return &Buffer{F64: any(data).([]float64)}
	}
}

// at reads element idx of v as float64; v may have fewer (leading batch)
// dims than idx.
func at(v backend.View, idx []int) float64 {
	idx = idx[len(idx)-len(v.Shape):]
	o := v.Offset
	for d, i := range idx {
		o += i * v.Strides[d]
	}
	b := buf(v)
	if b.F32 != nil {
		return float64(b.F32[o])
	}
	return b.F64[o]
}

// matmulRef computes every batch of dst (+)= a@b in float64 with gemmRef on
// copies of the operands gathered element by element through their strides,
// independently of MatMul's layout logic. It returns the expected dst, row
// major.
func matmulRef(dst, a, bm backend.View, accumulate bool) []float64 {
	r := len(dst.Shape)
	m, n, k := dst.Shape[r-2], dst.Shape[r-1], a.Shape[r-1]
	batch := dst.Shape[:r-2]
	nb := 1
	for _, d := range batch {
		nb *= d
	}
	want := make([]float64, nb*m*n)
	idx := make([]int, r)
	for bi := 0; bi < nb; bi++ {
		rem := bi
		for d := len(batch) - 1; d >= 0; d-- {
			idx[d] = rem % batch[d]
			rem /= batch[d]
		}
		am, bmm := make([]float64, m*k), make([]float64, k*n)
		for i := 0; i < m; i++ {
			for p := 0; p < k; p++ {
				idx[r-2], idx[r-1] = i, p
				am[i*k+p] = at(a, idx)
			}
		}
		for p := 0; p < k; p++ {
			for j := 0; j < n; j++ {
				idx[r-2], idx[r-1] = p, j
				bmm[p*n+j] = at(bm, idx)
			}
		}
		c := want[bi*m*n : (bi+1)*m*n]
		var beta float64
		if accumulate {
			beta = 1
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					idx[r-2], idx[r-1] = i, j
					c[i*n+j] = at(dst, idx)
				}
			}
		}
		gemmRef(false, false, m, n, k, 1, am, k, bmm, n, beta, c, n)
	}
	return want
}

type matmulCase struct {
	batch      []int
	m, n, k    int
	a, b       matOperand
	accumulate bool
}

func (c matmulCase) String() string {
	return fmt.Sprintf("batch=%v m=%d n=%d k=%d a=%+v b=%+v acc=%v", c.batch, c.m, c.n, c.k, c.a, c.b, c.accumulate)
}

func runMatmulCase[T Float](t *testing.T, be *Backend, r *rand.Rand, c matmulCase, tol float64) {
	t.Helper()
	if c.a.batchShape == nil {
		c.a.batchShape = c.batch
	}
	if c.b.batchShape == nil {
		c.b.batchShape = c.batch
	}
	a := makeOperand[T](r, c.a, c.m, c.k, 3)
	bm := makeOperand[T](r, c.b, c.k, c.n, 5)
	dst := makeOperand[T](r, matOperand{batchShape: c.batch}, c.m, c.n, 2)
	want := matmulRef(dst, a, bm, c.accumulate)
	be.MatMul(dst, a, bm, c.accumulate)
	got := toF64(floats[T](dst)[:len(want)])
	if d := maxRelDiff(1, len(want), got, 0, want, 0); d > tol {
		t.Fatalf("matmul %v: max rel diff %.3g > %.3g", c, d, tol)
	}
}

func TestMatMulLayouts(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		be := New()
		r := rand.New(rand.NewPCG(21, 22))
		for _, ca := range []bool{false, true} {
			for _, cb := range []bool{false, true} {
				for _, m := range oddSizes {
					for _, n := range oddSizes {
						for _, k := range oddSizes {
							c := matmulCase{m: m, n: n, k: k,
								a: matOperand{colMajor: ca, pad: (m + k) % 3},
								b: matOperand{colMajor: cb, pad: (n + k) % 2}}
							runMatmulCase[float64](t, be, r, c, 1e-13)
							if m == n || n == k {
								runMatmulCase[float32](t, be, r, c, tol32(k))
							}
						}
					}
				}
			}
		}
	})
}

func TestMatMulBatchAndAccumulate(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(23, 24))
		cases := []matmulCase{
			// a broadcast over the second batch axis, b over the first.
			{batch: []int{2, 3}, m: 17, n: 65, k: 3,
				a: matOperand{batchStrides: []int{17 * 3, 0}},
				b: matOperand{batchStrides: []int{0, 3 * 65}, colMajor: true}},
			// a shared by every batch (a weight), b per batch, accumulate.
			{batch: []int{4}, m: 65, n: 17, k: 130,
				a: matOperand{batchStrides: []int{0}, colMajor: true, pad: 1},
				b: matOperand{pad: 2}, accumulate: true},
			// b has fewer batch dims than dst: broadcast over the leading one.
			{batch: []int{3, 2}, m: 3, n: 5, k: 7,
				b: matOperand{batchShape: []int{2}}},
			// Many batches (parallel over batches), both transposed.
			{batch: []int{16}, m: 33, n: 40, k: 64,
				a: matOperand{colMajor: true}, b: matOperand{colMajor: true}, accumulate: true},
			// Batches not a multiple of the workers (each product split).
			{batch: []int{3}, m: 130, n: 130, k: 65},
			// Large single products: split by rows, by columns (small M).
			{m: 300, n: 129, k: 200, a: matOperand{colMajor: true}},
			{m: 5, n: 700, k: 200, b: matOperand{colMajor: true}, accumulate: true},
			{m: 1, n: 1000, k: 300},
			{m: 40, n: 300, k: 64, b: matOperand{colMajor: true}}, // N > M: split by columns
			{m: 40, n: 20, k: 400, a: matOperand{colMajor: true}}, // blocks not on multiples of 16
			// K = 0: dst = 0, or unchanged when accumulating.
			{batch: []int{2}, m: 4, n: 3, k: 0},
			{batch: []int{2}, m: 4, n: 3, k: 0, accumulate: true},
		}
		for _, workers := range []int{1, 2, 3} {
			be := New()
			be.workers = workers
			for _, c := range cases {
				runMatmulCase[float64](t, be, r, c, 1e-13)
				runMatmulCase[float32](t, be, r, c, tol32(c.k))
			}
		}
	})
}

func TestMatMulBadLayoutPanics(t *testing.T) {
	be := New()
	r := rand.New(rand.NewPCG(25, 26))
	a := makeOperand[float32](r, matOperand{}, 4, 6, 0)
	a.Strides = []int{12, 2} // neither row- nor column-major
	bm := makeOperand[float32](r, matOperand{}, 6, 5, 0)
	dst := makeOperand[float32](r, matOperand{}, 4, 5, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("MatMul accepted an operand with strides (12, 2)")
		}
	}()
	be.MatMul(dst, a, bm, false)
}

func TestMatMulDTypeMismatchPanics(t *testing.T) {
	be := New()
	r := rand.New(rand.NewPCG(27, 28))
	a := makeOperand[float32](r, matOperand{}, 4, 6, 0)
	bm := makeOperand[float64](r, matOperand{}, 6, 5, 0)
	dst := makeOperand[float32](r, matOperand{}, 4, 5, 0)
	defer func() {
		if recover() == nil {
			t.Fatal("MatMul accepted float32 @ float64")
		}
	}()
	be.MatMul(dst, a, bm, false)
}

// TestMatMulThreadedBLAS runs large single products (on OpenBLAS's own
// threads) while other goroutines call gemm on small tiles, as the
// attention kernel does: every result must be right and OpenBLAS must be
// back at one thread afterwards.
func TestMatMulThreadedBLAS(t *testing.T) {
	ok, restore := useBLAS(true)
	defer restore()
	if !ok {
		t.Skip("no BLAS library loaded")
	}
	prevLone := blasLoneThreads
	blasLoneThreads = true
	defer func() { blasLoneThreads = prevLone }()
	if loadedBLAS.setThreads == 0 {
		t.Skipf("%s cannot set its thread count", loadedBLAS.name)
	}
	be := New()
	be.workers = 2
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 31))
			m, n, k := 32, 32, 32
			a, b := randSlice[float32](r, m*k), randSlice[float32](r, n*k)
			c, want := make([]float32, m*n), make([]float32, m*n)
			gemmRef(false, true, m, n, k, 1, a, k, b, k, 0, want, n)
			for {
				select {
				case <-stop:
					return
				default:
				}
				gemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
				if d := maxRelDiff(m, n, c, n, want, n); d > tol32(k) {
					errs <- fmt.Errorf("tile gemm during threaded matmul: max rel diff %g", d)
					return
				}
			}
		}(g)
	}
	r := rand.New(rand.NewPCG(32, 33))
	for i := 0; i < 5; i++ {
		runMatmulCase[float32](t, be, r, matmulCase{m: 200, n: 190, k: 180, b: matOperand{colMajor: true}}, tol32(180))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := loadedBLAS.blasThreads(); n != 1 {
		t.Fatalf("OpenBLAS left at %d threads, want 1", n)
	}
}

// TestMatMulMany: several products at once give, bit for bit, what MatMul
// gives for each product alone on one worker, and on any number of
// workers; the cases include the two gradients of a linear layer (equal
// work: run side by side) and unbalanced sets (run in turn).
// TestMatMulMany: MatMulMany gives each product the result MatMul gives
// it. On the Go kernel that holds bit for bit by construction, whatever the
// worker count: gemm's blocks along M and N never change the order of any
// element's sum over K. A BLAS promises no such thing: a product split into
// row blocks is a different call (other sizes, pointers and alignment), for
// which the library may choose another kernel — OpenBLAS's Haswell, Zen and
// Prescott cores sum a 64×64×64 product differently from its row halves —
// so there the results of different worker counts must agree within the
// rounding bound of two float evaluations of the same sums, and a run
// repeated with the same worker count (identical calls) must agree bit for
// bit.
func TestMatMulMany(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		exact := activeBLAS.Load() == nil
		sets := [][]matmulCase{
			{ // dX = dY·W and dW = Xᵀ·dY of a 256→96 linear layer on 300 rows
				{m: 300, n: 96, k: 256},
				{m: 96, n: 256, k: 300, a: matOperand{colMajor: true}},
			},
			{ // unbalanced, with accumulate, a batch and a column-major b
				{m: 200, n: 180, k: 150, b: matOperand{colMajor: true}, accumulate: true},
				{batch: []int{3}, m: 17, n: 33, k: 40},
				{m: 64, n: 64, k: 64, a: matOperand{colMajor: true, pad: 3}},
			},
			{ // three of equal size (3 workers: one each)
				{m: 130, n: 70, k: 90}, {m: 130, n: 70, k: 90, accumulate: true}, {m: 70, n: 130, k: 90},
			},
			{{m: 3, n: 4, k: 5}, {m: 2, n: 2, k: 0}}, // small: in turn
		}
		for si, set := range sets {
			for _, f32 := range []bool{true, false} {
				r := rand.New(rand.NewPCG(uint64(si), 7))
				type prod struct{ dst, a, b backend.View }
				var want, bound [][]float64
				var prods []prod
				for _, c := range set {
					if c.a.batchShape == nil {
						c.a.batchShape = c.batch
					}
					if c.b.batchShape == nil {
						c.b.batchShape = c.batch
					}
					var p prod
					if f32 {
						p = prod{makeOperand[float32](r, matOperand{batchShape: c.batch}, c.m, c.n, 2),
							makeOperand[float32](r, c.a, c.m, c.k, 3), makeOperand[float32](r, c.b, c.k, c.n, 5)}
					} else {
						p = prod{makeOperand[float64](r, matOperand{batchShape: c.batch}, c.m, c.n, 2),
							makeOperand[float64](r, c.a, c.m, c.k, 3), makeOperand[float64](r, c.b, c.k, c.n, 5)}
					}
					prods = append(prods, p)
				}
				snapshot := func(v backend.View) []float64 {
					if f32 {
						return toF64(floats[float32](v))
					}
					return append([]float64(nil), floats[float64](v)...)
				}
				restore := func(v backend.View, x []float64) {
					if f32 {
						d := floats[float32](v)
						for i := range x {
							d[i] = float32(x[i])
						}
					} else {
						copy(floats[float64](v), x)
					}
				}
				u := unitRoundoff[float64]()
				if f32 {
					u = unitRoundoff[float32]()
				}
				init := make([][]float64, len(prods))
				for i, p := range prods {
					init[i] = snapshot(p.dst)
					// Each evaluation is within γ_{k+1}·(Σ_p |a_ip||b_pj| + |c_ij|)
					// of the exact result (k products and sums, one more
					// for the accumulate), so two are within twice that.
					mag := matmulRef(absView(p.dst), absView(p.a), absView(p.b), set[i].accumulate)
					g := 2 * gamma(set[i].k+1, u)
					for j := range mag {
						mag[j] *= g
					}
					bound = append(bound, mag)
				}
				one := New()
				one.workers = 1
				for i, p := range prods {
					one.MatMul(p.dst, p.a, p.b, set[i].accumulate)
					want = append(want, snapshot(p.dst))
				}
				for _, workers := range []int{1, 2, 3, 8} {
					be := New()
					be.workers = workers
					ops := make([]backend.MatMulOp, len(prods))
					run := func() [][]float64 {
						for i, p := range prods {
							restore(p.dst, init[i])
							ops[i] = backend.MatMulOp{Dst: p.dst, A: p.a, B: p.b, Accumulate: set[i].accumulate}
						}
						be.MatMulMany(ops)
						var out [][]float64
						for _, p := range prods {
							out = append(out, snapshot(p.dst))
						}
						return out
					}
					first, again := run(), run()
					for i := range prods {
						got := first[i]
						for j := range got {
							if again[i][j] != got[j] {
								t.Fatalf("set %d f32=%v workers %d: product %d element %d = %v, then %v on the same calls",
									si, f32, workers, i, j, got[j], again[i][j])
							}
							// Snapshots hold the whole buffer; only the
							// product's own rows × columns are bounded.
							if j >= len(bound[i]) || (exact && got[j] == want[i][j]) {
								continue
							}
							if exact {
								t.Fatalf("set %d f32=%v workers %d: product %d element %d = %v, alone on one worker %v (the Go kernel must not depend on the split)",
									si, f32, workers, i, j, got[j], want[i][j])
							}
							if d := math.Abs(got[j] - want[i][j]); d > bound[i][j] {
								t.Fatalf("set %d f32=%v workers %d: product %d element %d = %v, alone on one worker %v: differ by %.3g, beyond the rounding bound %.3g",
									si, f32, workers, i, j, got[j], want[i][j], d, bound[i][j])
							}
						}
					}
				}
			}
		}
	})
}

// absView is a copy of v's buffer with every value made non-negative,
// viewed with v's layout: matmulRef over such views gives Σ_p |a_ip||b_pj|
// (+ |c_ij|), the magnitude that scales a product's rounding error.
func absView(v backend.View) backend.View {
	b := buf(v)
	if b.F32 != nil {
		d := make([]float32, len(b.F32))
		for i, x := range b.F32 {
			d[i] = float32(math.Abs(float64(x)))
		}
		v.Buf = &Buffer{F32: d}
		return v
	}
	d := make([]float64, len(b.F64))
	for i, x := range b.F64 {
		d[i] = math.Abs(x)
	}
	v.Buf = &Buffer{F64: d}
	return v
}

// BenchmarkMatMulPair: the two gradients of the tiny GPT's linear layers
// (2048 rows), side by side (MatMulMany) or each split in turn.
func BenchmarkMatMulPair(bb *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][2]int{{128, 512}, {512, 128}, {128, 384}, {128, 128}, {256, 1024}, {1024, 256}, {256, 768}, {256, 4096}} {
		in, out := s[0], s[1]
		const rows = 2048
		x := makeOperand[float32](r, matOperand{}, rows, in, 0)
		w := makeOperand[float32](r, matOperand{}, out, in, 0)
		g := makeOperand[float32](r, matOperand{}, rows, out, 0)
		dx := makeOperand[float32](r, matOperand{}, rows, in, 0)
		dw := makeOperand[float32](r, matOperand{}, in, out, 0)
		xt := backend.View{Buf: x.Buf, Shape: []int{in, rows}, Strides: []int{1, in}}
		ops := []backend.MatMulOp{{Dst: dx, A: g, B: w}, {Dst: dw, A: xt, B: g}}
		be := New()
		bb.Run(fmt.Sprintf("%dx%d/many", in, out), func(bb *testing.B) {
			for bb.Loop() {
				be.MatMulMany(ops)
			}
		})
		one := New()
		one.workers = 1
		for i, op := range ops {
			bb.Run(fmt.Sprintf("%dx%d/alone%d", in, out, i), func(bb *testing.B) {
				for bb.Loop() {
					one.MatMul(op.Dst, op.A, op.B, false)
				}
			})
			bb.Run(fmt.Sprintf("%dx%d/split%d", in, out, i), func(bb *testing.B) {
				for bb.Loop() {
					be.MatMul(op.Dst, op.A, op.B, false)
				}
			})
		}
		bb.Run(fmt.Sprintf("%dx%d/inturn", in, out), func(bb *testing.B) {
			for bb.Loop() {
				for _, op := range ops {
					be.MatMul(op.Dst, op.A, op.B, false)
				}
			}
		})
	}
}

// TestGoOverBLAS: which libraries give way to the Go kernel.
func TestGoOverBLAS(t *testing.T) {
	prev := goKernelName
	defer func() { goKernelName = prev }()
	for _, c := range []struct {
		goKernel string
		lib      *blasLibrary
		want     bool
	}{
		{"go-avx512", nil, false},
		{"go-avx512", &blasLibrary{core: "SkylakeX"}, true},
		{"go-avx512", &blasLibrary{core: "Cooperlake"}, true},
		{"go-avx512", &blasLibrary{core: "Zen"}, true},
		{"go-avx512", &blasLibrary{core: "Haswell"}, true},
		{"go-avx512", &blasLibrary{core: "Prescott"}, false}, // bypassed as a whole instead
		{"go-avx512", &blasLibrary{core: ""}, false},         // not an OpenBLAS, or it did not say
		{"go-avx512", &blasLibrary{core: "NEOVERSEN1"}, false},
		{"go-avx512", &blasLibrary{ownThreads: true}, false},
		{"go-avx2", &blasLibrary{core: "Haswell"}, false}, // the AVX2 kernel fell to 74 GFLOP/s at 2048³, OpenBLAS 101
		{"go-avx2", &blasLibrary{core: "SkylakeX"}, false},
		{"go", &blasLibrary{core: "Haswell"}, false},
	} {
		goKernelName = c.goKernel
		if got := goOverBLAS(c.lib); got != c.want {
			t.Errorf("Go kernel %s, library %+v: goOverBLAS = %v, want %v", c.goKernel, c.lib, got, c.want)
		}
	}
}

// TestMatMulRunsGo: with a library loaded that gives way (goOverBLAS),
// a lone product on several workers, and the products MatMulMany runs
// side by side, are the Go kernel's, bit for bit the single-threaded Go
// product for any worker count and either path, and Variant names
// the Go kernel; small products (a batch of four 32³) are the library's.
func TestMatMulRunsGo(t *testing.T) {
	ok, restore := useBLAS(true)
	defer restore()
	if !ok || !goOverBLAS(loadedBLAS) {
		t.Skipf("no library that gives way to the Go kernel here (%s)", BLASInfo())
	}
	r := rand.New(rand.NewPCG(41, 42))
	m, n, k := 301, 203, 517
	a := makeOperand[float32](r, matOperand{}, m, k, 0)
	b := makeOperand[float32](r, matOperand{colMajor: true}, k, n, 0)
	want := make([]float32, m*n)
	gemmGo(false, true, m, n, k, 1, floats[float32](a), k, floats[float32](b), k, 0, want, n)
	same := func(what string, dst backend.View) {
		t.Helper()
		for i, x := range floats[float32](dst) {
			if math.Float32bits(x) != math.Float32bits(want[i]) {
				t.Fatalf("%s: element (%d, %d) = %v, the Go kernel alone %v", what, i/n, i%n, x, want[i])
			}
		}
	}
	for _, w := range []int{1, 2, 3, 4} {
		be := New()
		be.workers = w
		dst := makeOperand[float32](r, matOperand{}, m, n, 0)
		be.MatMul(dst, a, b, false)
		if v := be.Variant("matmul"); v != goKernelName {
			t.Errorf("%d workers: Variant(matmul) = %q, want %q", w, v, goKernelName)
		}
		same(fmt.Sprintf("MatMul on %d workers", w), dst)
		// Two products side by side, one per worker.
		d1 := makeOperand[float32](r, matOperand{}, m, n, 0)
		d2 := makeOperand[float32](r, matOperand{}, m, n, 0)
		be.MatMulMany([]backend.MatMulOp{{Dst: d1, A: a, B: b}, {Dst: d2, A: a, B: b}})
		same(fmt.Sprintf("MatMulMany on %d workers", w), d1)
		same(fmt.Sprintf("MatMulMany on %d workers", w), d2)
	}
	be := New()
	be.workers = 2
	batch := matOperand{batchShape: []int{4}}
	x := makeOperand[float32](r, batch, 32, 32, 0)
	y := makeOperand[float32](r, batch, 32, 32, 0)
	z := makeOperand[float32](r, batch, 32, 32, 0)
	be.MatMul(z, x, y, false)
	if v := be.Variant("matmul"); v != loadedBLAS.name {
		t.Errorf("a batch of four 32³ on 2 workers: Variant(matmul) = %q, want the library's %q", v, loadedBLAS.name)
	}
}
