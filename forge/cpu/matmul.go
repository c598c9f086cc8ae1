package cpu

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/forgeml/forge/forge/backend"
)

// MatMul computes dst[b] = a[b] @ bm[b] (dst += … when accumulate) for
// every batch index b: a (..., M, K), bm (..., K, N), dst (..., M, N) with
// row-major last two dims. Each operand's matrix dims may be row-major
// (strides (ld, 1)) or column-major (strides (1, ld)); the column-major
// ones go to gemm as transposed with their leading dimension, never copied.
// Batch dims broadcast with stride 0 (a missing leading batch dim counts as
// broadcast too).
//
// Work is split over the backend's workers: whole products when there are
// many batches, each a single-threaded gemm; when there are too few
// products to go around, each is split into row (or column) blocks, one
// single-threaded gemm per worker, or, with FORGE_BLAS_THREADED=1, runs on
// OpenBLAS's threads (one call at a time). Products that are split, or
// not small, run on the AVX-512 Go kernel rather than OpenBLAS where
// there is one (goOverBLAS). With a BLAS that runs its own
// threads (Accelerate) every product is one call from this goroutine.
func (b *Backend) MatMul(dst, a, bm backend.View, accumulate bool) {
	dt := dst.DType()
	if a.DType() != dt || bm.DType() != dt {
		panic(fmt.Sprintf("cpu: matmul: dtypes differ: dst %v, a %v, b %v", dt, a.DType(), bm.DType()))
	}
	switch dt {
	case backend.Float32:
		matmul[float32](b, b.workers, dst, a, bm, accumulate)
	case backend.Float64:
		matmul[float64](b, b.workers, dst, a, bm, accumulate)
	default:
		panic(badDType("matmul", dt))
	}
}

// MatMulMany runs several independent products (backend.KernelMatMulMany).
// Split across the workers in turn, a thin product (the weight gradient
// of a linear layer: 128×512 with K = 2048 in the tiny GPT) runs well below
// a single-threaded gemm's speed, each half re-packing the other operand;
// the two gradients of a product have equal FLOPs, so running them side
// by side, each unsplit on its own worker, keeps every worker on a whole
// product. Products are dealt to the workers largest first (each to the
// least loaded); when that cannot balance them (one product much larger
// than the rest), or the work is small, each runs in turn as MatMul would.
// On the Go kernel a product's result does not depend on which path ran
// it: gemm's blocks along M and N do not change any element's sum over K.
// A BLAS may pick another kernel for a row block than for the whole
// product (OpenBLAS's Haswell and Zen cores do), so there the paths agree
// within rounding, and bit for bit only for the same calls: the same
// products on the same worker count, which is what makes a run
// reproducible on one machine.
//
// Measured (BenchmarkMatMulPair, 2048 rows, OpenBLAS, 2 Zen 4 cores,
// medians of 5–6 interleaved runs, µs for both gradients of a layer
// in→out): 128→128 958 split in turn, 880 side by side; 128→384 2600 /
// 2640 (even); 256→768 12300 / 9900; 256→1024 15000 / 13100; 1024→256
// 15100 / 13000; 256→4096 52000 / 48000.
var _ = declare(backend.KernelMatMulMany, computed)

func (b *Backend) MatMulMany(ops []backend.MatMulOp) {
	w := b.workers
	if lib := activeBLAS.Load(); lib != nil && (lib.ownThreads || blasLoneThreads) {
		w = 1
	}
	work := make([]int64, len(ops))
	var total, most int64
	for i, op := range ops {
		dt := op.Dst.DType()
		if op.A.DType() != dt || op.B.DType() != dt {
			panic(fmt.Sprintf("cpu: matmul: dtypes differ: dst %v, a %v, b %v", dt, op.A.DType(), op.B.DType()))
		}
		if dt != backend.Float32 && dt != backend.Float64 {
			panic(badDType("matmul", dt))
		}
		if len(op.Dst.Shape) >= 2 && len(op.A.Shape) >= 2 {
			work[i] = int64(op.Dst.Numel()) * int64(op.A.Shape[len(op.A.Shape)-1])
		}
		total += work[i]
		most = max(most, work[i])
	}
	// Deal the products to min(w, len) bins, largest first; accept when the
	// fullest bin holds at most 5/4 of the even share.
	w = min(w, len(ops))
	var bins [][]int
	if w > 1 && total >= 2*matmulParallelWork {
		order := make([]int, len(ops))
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(work[y], work[x]) })
		bins = make([][]int, w)
		load := make([]int64, w)
		for _, i := range order {
			j := slices.Index(load, slices.Min(load))
			bins[j] = append(bins[j], i)
			load[j] += work[i]
		}
		if slices.Max(load)*4*int64(w) > 5*total {
			bins = nil
		}
	}
	if bins == nil {
		for _, op := range ops {
			b.MatMul(op.Dst, op.A, op.B, op.Accumulate)
		}
		return
	}
	run := func(bin []int) {
		for _, i := range bin {
			op := ops[i]
			if op.Dst.DType() == backend.Float32 {
				matmul[float32](b, 1, op.Dst, op.A, op.B, op.Accumulate)
			} else {
				matmul[float64](b, 1, op.Dst, op.A, op.B, op.Accumulate)
			}
		}
	}
	fork(len(bins), func(p int) { run(bins[p]) })
}

// matrixLayout returns how gemm reads the last two dims (rows, cols) of v:
// trans is false for row-major (element (i, j) at i·ld + j) and true for
// column-major (at j·ld + i). A dimension of size 1 may have any stride.
func matrixLayout(name string, v backend.View) (trans bool, ld int) {
	r := len(v.Shape)
	rows, cols := v.Shape[r-2], v.Shape[r-1]
	rs, cs := v.Strides[r-2], v.Strides[r-1]
	switch {
	case cs == 1 || cols == 1:
		if rows == 1 {
			return false, max(cols, 1)
		}
		return false, rs
	case rs == 1 || rows == 1:
		if cols == 1 {
			return true, max(rows, 1)
		}
		return true, cs
	}
	panic(fmt.Sprintf("cpu: matmul: %s %v has strides %v: its last two dims must be row- or column-major",
		name, v.Shape, v.Strides))
}

// matmulParallelWork is the smallest total m·n·k worth more than one
// goroutine (a fork/join costs a few µs).
const matmulParallelWork = 1 << 18

// minSplit is the smallest block of rows (or columns) a worker is given;
// large blocks are rounded to multiples of it so that they fill whole
// micro-kernel tiles.
const minSplit = 16

// matmul runs one (batched) product on at most w workers.
func matmul[T Float](be *Backend, w int, dst, a, bm backend.View, accumulate bool) {
	r := len(dst.Shape)
	if r < 2 || len(a.Shape) < 2 || len(bm.Shape) < 2 {
		panic(fmt.Sprintf("cpu: matmul: operands need two dims: dst %v, a %v, b %v", dst.Shape, a.Shape, bm.Shape))
	}
	m, n := dst.Shape[r-2], dst.Shape[r-1]
	k := a.Shape[len(a.Shape)-1]
	if a.Shape[len(a.Shape)-2] != m || bm.Shape[len(bm.Shape)-2] != k || bm.Shape[len(bm.Shape)-1] != n {
		panic(fmt.Sprintf("cpu: matmul: shapes do not chain: dst %v, a %v, b %v", dst.Shape, a.Shape, bm.Shape))
	}
	nb := 1
	for _, d := range dst.Shape[:r-2] {
		nb *= d
	}
	if m == 0 || n == 0 || nb == 0 {
		return
	}
	if dst.Strides[r-1] != 1 && n != 1 {
		panic(fmt.Sprintf("cpu: matmul: dst %v has strides %v: its rows must be contiguous", dst.Shape, dst.Strides))
	}
	ldc := dst.Strides[r-2]
	if m == 1 {
		ldc = n
	}
	transA, lda := matrixLayout("a", a)
	transB, ldb := matrixLayout("b", bm)
	var beta T
	if accumulate {
		beta = 1
	}
	offs := batchOffsets(dst, a, bm, nb)
	cs, as, bs := floats[T](dst), floats[T](a), floats[T](bm)

	// Decide how to use the workers. Many products: whole products per
	// worker, each a single-threaded gemm. Too few to go around: split each
	// product into w blocks, one single-threaded gemm per worker — or, if
	// blasLoneThreads is set, one call per product on w of OpenBLAS's
	// threads (faster for a product alone, slower inside a training step,
	// see blas.go).
	lib := activeBLAS.Load()
	if lib != nil && lib.ownThreads {
		w = 1
	}
	if nb*m*n*max(k, 1) < matmulParallelWork {
		w = 1
	}
	few := w > 1 && nb%w != 0 && nb < 4*w
	if few && blasLoneThreads && lib != nil && lib.setThreads != 0 && k > 0 && blasFits(transA, transB, m, n, k, lda, ldb, ldc) {
		be.matmulPath.Store(&lib.name)
		for bi := 0; bi < nb; bi++ {
			ao, bo, co := offs[3*bi], offs[3*bi+1], offs[3*bi+2]
			gemmThreads(w, transA, transB, m, n, k, 1, as[ao:], lda, bs[bo:], ldb, beta, cs[co:], ldc)
		}
		return
	}
	// Products worth sharing out run on the Go kernel rather than the
	// library when that is the AVX-512 kernel: see goOverBLAS.
	split, path := gemm[T], &goKernelName
	if lib != nil {
		path = &lib.name
	}
	if (few || m*n*k >= matmulParallelWork) && goOverBLAS(lib) {
		split, path = gemmGoChecked[T], &goKernelName
	}
	be.matmulPath.Store(path)
	// Split the larger of M and N: every block re-reads (and gemm re-packs)
	// the whole of the other operand, M·K elements for a column split, K·N
	// for a row split, so the smaller one is the one to duplicate.
	s, byRows := 1, n <= m
	if few {
		switch {
		case byRows && m >= w*minSplit, !byRows && n >= w*minSplit:
			s = w
		case m >= w*minSplit:
			s, byRows = w, true
		case n >= w*minSplit:
			s, byRows = w, false
		}
	}
	extent := m
	if !byRows {
		extent = n
	}
	// Block p of s covers [lo, hi) of the split dimension; boundaries fall
	// on multiples of minSplit when the blocks are large.
	g := 1
	if extent >= 4*s*minSplit {
		g = minSplit
	}
	block := func(p int) (lo, hi int) {
		lo, hi = extent*p/s/g*g, extent*(p+1)/s/g*g
		if p == s-1 {
			hi = extent
		}
		return lo, hi
	}
	run := func(t int) {
		bi, p := t/s, t%s
		ao, bo, co := offs[3*bi], offs[3*bi+1], offs[3*bi+2]
		lo, hi := 0, extent
		if s > 1 {
			lo, hi = block(p)
		}
		if lo >= hi {
			return
		}
		if byRows {
			if transA {
				ao += lo
			} else {
				ao += lo * lda
			}
			split(transA, transB, hi-lo, n, k, 1, as[ao:], lda, bs[bo:], ldb, beta, cs[co+lo*ldc:], ldc)
			return
		}
		if transB {
			bo += lo * ldb
		} else {
			bo += lo
		}
		split(transA, transB, m, hi-lo, k, 1, as[ao:], lda, bs[bo:], ldb, beta, cs[co+lo:], ldc)
	}
	tasks := nb * s
	w = min(w, tasks)
	if w <= 1 {
		for t := 0; t < tasks; t++ {
			run(t)
		}
		return
	}
	fork(w, func(wi int) {
		for t := wi * tasks / w; t < (wi+1)*tasks/w; t++ {
			run(t)
		}
	})
}

// goOverBLAS reports whether MatMul's products run on forge's Go kernel
// rather than on lib — those of at least matmulParallelWork, and any it
// splits between its workers: when lib is an OpenBLAS on x86 kernels and
// the Go kernel is the AVX-512 one. Measured on 2 cores of an Intel Xeon
// (AVX-512, family 6 model 167), OpenBLAS 0.3.21 SkylakeX, medians:
//
//   - a lone product split in two, each block a single-threaded call that
//     packs the whole other operand, GFLOP/s Go / OpenBLAS (tests/bench):
//     1024³ 282 / 228, 2048³ 296 / 289, 4096×256×1024 269 / 214,
//     4096×1024×256 NT 277 / 225, 256×1024×4096 TN 240 / 195;
//   - the two gradients of a linear layer side by side, one whole
//     single-threaded product per worker (BenchmarkMatMulPair, 2048
//     rows), ms Go / OpenBLAS: 256→768 6.0 / 8.0–8.5, 256→1024 8.3–9.1 /
//     10.8–11.2, 1024→256 8.8 / 10.0–10.4; at 128 wide about even;
//   - training steps (tests/benchtrain): tiny 101–106 ms / 101–110, small
//     504–525 / 535–566.
//
// Smaller products stay on the library, whose small-matrix kernels are
// quicker (16³: 0.35 µs against 0.62); attention's tiles have their own
// kernel (attntile.go). The AVX2 Go kernel is not preferred: it fell to 74
// GFLOP/s at 2048³ where OpenBLAS Haswell held 101. On the Go kernel a
// product's bits depend neither on the number of workers nor on whether
// it ran whole or split (gemm.go). Not for Accelerate (it splits nothing)
// nor for cores blasCoreTier does not know (other architectures).
func goOverBLAS(lib *blasLibrary) bool {
	if lib == nil || lib.ownThreads || lib.core == "" {
		return false
	}
	return goKernelTier() == blasTierAVX512 && blasCoreTier(lib.core) >= blasTierAVX2
}

// batchOffsets returns, for each of the nb batch indices of dst (row-major
// order), the element offsets of a, b and dst's matrices relative to their
// view offsets, as triples. Operands with fewer batch dims broadcast over
// the leading ones.
func batchOffsets(dst, a, bm backend.View, nb int) []int {
	offs := make([]int, 3*nb)
	rb := len(dst.Shape) - 2
	if rb == 0 {
		return offs
	}
	views := [3]backend.View{a, bm, dst}
	var strides [3][]int
	for v, x := range views {
		st, err := backend.BatchStrides(x, dst.Shape, rb)
		if err != nil {
			panic("cpu: matmul: " + err.Error())
		}
		strides[v] = st
	}
	idx := make([]int, rb)
	var cur [3]int
	for bi := 0; bi < nb; bi++ {
		copy(offs[3*bi:3*bi+3], cur[:])
		for d := rb - 1; d >= 0; d-- {
			idx[d]++
			for v := range cur {
				cur[v] += strides[v][d]
			}
			if idx[d] < dst.Shape[d] {
				break
			}
			for v := range cur {
				cur[v] -= strides[v][d] * dst.Shape[d]
			}
			idx[d] = 0
		}
	}
	return offs
}
