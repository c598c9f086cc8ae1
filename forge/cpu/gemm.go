package cpu

// gemm: one single-threaded matrix product. It goes to BLAS when a library
// loaded (blas.go), else to a pure-Go blocked kernel in the Goto/BLIS
// style:
//
//	for jc over N in steps of nc:           B panel (kc×nc) packed, in L3
//	  for pc over K in steps of kc:
//	    pack B[pc:pc+kc, jc:jc+nc] into nr-wide slivers
//	    for ic over M in steps of mc:        A block (mc×kc) packed, in L2
//	      pack alpha·A[ic:ic+mc, pc:pc+kc] into mr-tall slivers
//	      for jr over the panel by nr:       B sliver (kc×nr) in L1
//	        for ir over the block by mr:
//	          micro-kernel: C[mr×nr] (+)= A sliver · B sliver
//
// Packing reads either layout of A and B, so the four transpose cases cost
// the same. The micro-kernel keeps the mr×nr tile of C in registers. On
// amd64 (gemm_amd64.go picks; FORGE_GEMM_KERNEL=avx512|avx2|go forces one):
// an AVX-512 kernel, 12×32 float32 and 12×16 float64 in 24 ZMM
// accumulators (gemm_avx512_amd64.s), where the CPU and the OS support
// AVX-512F; else an AVX2/FMA kernel, 6×16 float32 and 6×8 float64
// (gemm_amd64.s); else, and on other architectures (the build tag purego
// forces it on amd64 too), a 2×4 Go kernel. Edge tiles are computed into a
// scratch tile and merged; the AVX-512 kernels compute only the left half
// of a tile at most half as wide. Every kernel sums each element of C over
// a kc block of k as one chain of multiply-adds in k order, from zero, and
// adds that to C, so a product's bits do not depend on how it is split
// into row or column blocks (MatMul relies on that).
//
// Measured single-threaded (-cpu 1, BenchmarkGemmKernels) on one core of
// an AMD EPYC Zen 4 (Genoa), GFLOP/s, medians of 7 interleaved runs on an
// otherwise idle machine; OpenBLAS 0.3.21 (pthreads build) at one thread;
// "-": not run (the 2×4 Go kernel takes seconds a product there):
//
//	                 go-avx512   go-avx2   go    OpenBLAS
//	float32 NN 256³      97         94      6.7     97
//	float32 NN 512³      98         97      5.9    102
//	float32 NN 1024³    100        101       -     101
//	float32 NN 2048³    101        102       -     104
//	float32 NT 1024³     94         96       -      95
//	float32 TN 1024³     93         94       -      97
//	float64 NN 512³      48         46      6.4     49
//	float64 NN 1024³     48         49       -      49
//
// Zen 4 runs a 512-bit FMA as two 256-bit halves, so the AVX-512 and AVX2
// kernels hit the same ceiling there (a kernel alone on a tile in L1:
// AVX-512 112, AVX2 104 GFLOP/s float32); on small products the wider tile wastes more at
// the edges (16³ NT: 16 against 20 GFLOP/s).
//
// The same on one core of an Intel Xeon with AVX-512 (KVM, family 6 model
// 167, two 512-bit FMA units: the FMA loop peaks at 208 GFLOP/s a core),
// OpenBLAS 0.3.21 SkylakeX, medians of 3 on an idle machine:
//
//	                 go-avx512   go-avx2   OpenBLAS
//	float32 NN 256³     141         94       131
//	float32 NN 512³     153         98       146
//	float32 NN 1024³    154         97       150
//	float32 NN 2048³    154         75       161
//	float32 NT 1024³    151         96       155
//	float32 TN 1024³    151         95       145
//	float64 NN 512³      69         44        65
//	float64 NN 1024³     71         35        69
//
// (the AVX2 kernel's 2 MiB B panel falls out of this core's 2 MiB L2 at
// 2048³; OpenBLAS's Haswell kernels hold 101 there).

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// gemm computes, single-threaded, the row-major product
//
//	C = alpha·op(A)·op(B) + beta·C
//
// with op(A) (m, k) and op(B) (k, n): A is read as (m, k) with leading
// dimension lda, or as (k, m) transposed when transA; likewise B. c is
// (m, n) with leading dimension ldc. When beta is 0, C is not read.
// It is safe to call from several goroutines at once.
func gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	gemmThreads(1, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmThreads is gemm, except that with threads > 1 an OpenBLAS runs the
// product on that many of its own threads (holding every other BLAS call
// off meanwhile, see blas.go). Other paths ignore threads.
func gemmThreads[T Float](threads int, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if !gemmPrologue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		return
	}
	if lib := activeBLAS.Load(); lib != nil && m*n*k >= blasMinWork && blasFits(transA, transB, m, n, k, lda, ldb, ldc) {
		blasCall(lib, threads, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmGoChecked is gemm on the Go kernel whatever BLAS is active.
func gemmGoChecked[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if gemmPrologue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) {
		gemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// gemmPrologue checks gemm's arguments against the slices (panicking on a
// short one) and does the products with nothing to sum (C = beta·C); it
// reports whether a product with m, n, k > 0 and alpha ≠ 0 remains.
func gemmPrologue[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) bool {
	if m <= 0 || n <= 0 {
		return false
	}
	checkExtent("c", len(c), false, m, n, ldc)
	if k <= 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return false
	}
	checkExtent("a", len(a), transA, m, k, lda)
	checkExtent("b", len(b), transB, k, n, ldb)
	return true
}

// blasMinWork is the smallest m·n·k sent to BLAS; below it the Go kernel
// is as fast as the call and BLAS's own set-up. Measured (NT, float32, one
// call): 4³ Go 0.13 µs; 8³ Go 0.27, OpenBLAS 0.24 µs; 16³ Go 0.62,
// OpenBLAS 0.35 µs; 32³ Go 2.3, OpenBLAS 1.3 µs.
const blasMinWork = 8 * 8 * 8

// checkExtent panics unless a slice of length n holds a rows×cols matrix
// (cols×rows stored, when trans) with leading dimension ld. BLAS and the
// assembly kernel do not check bounds, so this is what keeps them in range.
func checkExtent(name string, n int, trans bool, rows, cols, ld int) {
	if trans {
		rows, cols = cols, rows
	}
	if ld < 0 {
		panic("cpu: gemm: negative leading dimension for " + name)
	}
	if need := (rows-1)*ld + cols; n < need {
		panic("cpu: gemm: " + name + " is shorter than its shape and leading dimension need")
	}
}

// scaleC sets C = beta·C (C = 0 when beta is 0, whatever C held).
func scaleC[T Float](m, n int, beta T, c []T, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// gemmKernel is a micro-kernel and the blocking that suits it.
type gemmKernel[T Float] struct {
	mr, nr     int // register tile of C
	kc, mc, nc int // cache blocks: kc·nr fits L1, mc·kc L2, kc·nc L3
	// fn computes the mr×nr tile c (leading dimension ldc) = a·b over k
	// steps, or c += a·b when accumulate. a is a packed sliver (k×mr, each
	// step's mr values contiguous), b likewise (k×nr).
	fn func(k int, a, b, c []T, ldc int, accumulate bool)
	// half, if not nil, is fn for the left nr/2 columns of the tile only
	// (c is mr×nr/2; b is still the nr-wide sliver), with the same
	// arithmetic for those columns: edge tiles at most half as wide as the
	// tile use it.
	half func(k int, a, b, c []T, ldc int, accumulate bool)
}

// gemmKernelSet is one family of micro-kernels: a float32 and a float64
// kernel with their blocking.
type gemmKernelSet struct {
	name    string // "go", "avx2", "avx512": the FORGE_GEMM_KERNEL value
	variant string // the matmul variant while it is in use
	k32     gemmKernel[float32]
	k64     gemmKernel[float64]
	tiles   attnTileKernels // attention's tile products (attntile.go); nil where the set has none
}

// portableGemm is the pure-Go kernel set, the one every platform has.
var portableGemm = gemmKernelSet{name: "go", variant: "go",
	k32: gemmKernel[float32]{mr: 2, nr: 4, kc: 256, mc: 128, nc: 2048, fn: microKernel2x4[float32]},
	k64: gemmKernel[float64]{mr: 2, nr: 4, kc: 256, mc: 64, nc: 1024, fn: microKernel2x4[float64]},
}

// gemmKernelSets lists the kernel sets this CPU runs, fastest first and
// portableGemm last; gemm_amd64.go puts the assembly ones in front and
// picks the set in use (chooseGemmKernels).
var gemmKernelSets = []gemmKernelSet{portableGemm}

// The kernels in use.
var (
	kernel32 = portableGemm.k32
	kernel64 = portableGemm.k64

	goKernelName = portableGemm.variant // the matmul variant of the pure-Go path
)

// setGemmKernels makes s the kernel set in use. Not safe while a gemm runs.
func setGemmKernels(s gemmKernelSet) {
	kernel32, kernel64, goKernelName = s.k32, s.k64, s.variant
	attnTiles = s.tiles
}

// chooseGemmKernels picks from sets (fastest first) the set named by env,
// the value of FORGE_GEMM_KERNEL, or the first when env is empty. An
// unknown name, or one this CPU cannot run, gets the first set and a
// one-line explanation in warn.
func chooseGemmKernels(sets []gemmKernelSet, env string) (use gemmKernelSet, warn string) {
	want := strings.ToLower(strings.TrimSpace(env))
	if want == "" {
		return sets[0], ""
	}
	var here []string
	for _, s := range sets {
		if s.name == want {
			return s, ""
		}
		here = append(here, s.name)
	}
	why := "is not a gemm kernel (choices: " + strings.Join(allGemmKernelNames, ", ") + ")"
	if slices.Contains(allGemmKernelNames, want) {
		why = "names a kernel this CPU cannot run; it runs " + strings.Join(here, ", ")
	}
	return sets[0], fmt.Sprintf("forge: FORGE_GEMM_KERNEL=%q %s: using %s", env, why, sets[0].name)
}

// allGemmKernelNames are the kernel set names on any machine.
var allGemmKernelNames = []string{"avx512", "avx2", "go"}

// gemmWork is one goroutine's packing space.
type gemmWork[T Float] struct {
	a, b []T // packed A block (mc×kc) and B panel (kc×nc), rounded up to whole slivers
	tmp  []T // one mr×nr edge tile
}

var (
	workPool32 = sync.Pool{New: func() any { return new(gemmWork[float32]) }}
	workPool64 = sync.Pool{New: func() any { return new(gemmWork[float64]) }}
)

func kernelAndWork[T Float]() (*gemmKernel[T], *gemmWork[T], *sync.Pool) {
	var z T
	if _, ok := any(z).(float32); ok {
		return any(&kernel32).(*gemmKernel[T]), workPool32.Get().(*gemmWork[T]), &workPool32
	}
	return any(&kernel64).(*gemmKernel[T]), workPool64.Get().(*gemmWork[T]), &workPool64
}

func roundUp(x, to int) int { return (x + to - 1) / to * to }

// grow returns s with length n, reallocating only when it is too short.
func grow[T Float](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// gemmGo is the pure-Go gemm (m, n, k > 0).
func gemmGo[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	kern, w, pool := kernelAndWork[T]()
	defer pool.Put(w)
	mr, nr := kern.mr, kern.nr
	if beta != 0 && beta != 1 {
		scaleC(m, n, beta, c, ldc)
		beta = 1
	}
	kcMax := min(kern.kc, k)
	w.a = grow(w.a, roundUp(min(kern.mc, m), mr)*kcMax)
	w.b = grow(w.b, roundUp(min(kern.nc, n), nr)*kcMax)
	w.tmp = grow(w.tmp, mr*nr)
	for jc := 0; jc < n; jc += kern.nc {
		nc := min(kern.nc, n-jc)
		for pc := 0; pc < k; pc += kern.kc {
			kc := min(kern.kc, k-pc)
			packB(w.b, transB, b, ldb, pc, jc, kc, nc, nr)
			accumulate := beta != 0 || pc > 0
			for ic := 0; ic < m; ic += kern.mc {
				mc := min(kern.mc, m-ic)
				packA(w.a, transA, a, lda, ic, pc, mc, kc, mr, alpha)
				macroKernel(kern, w, mc, nc, kc, c[ic*ldc+jc:], ldc, accumulate)
			}
		}
	}
}

// packA copies alpha·op(A)[ic:ic+mc, pc:pc+kc] into mr-tall slivers: sliver
// s holds rows s·mr… as kc groups of mr values, zero-padded past mc.
func packA[T Float](dst []T, transA bool, a []T, lda, ic, pc, mc, kc, mr int, alpha T) {
	if transA {
		// op(A)(i, p) = a[(pc+p)·lda + ic+i]
		packRuns(dst, a[pc*lda+ic:], lda, mc, mr, kc, alpha)
		return
	}
	for ir := 0; ir < mc; ir += mr {
		// op(A)(i, p) = a[(ic+i)·lda + pc+p]
		packGather(dst[ir*kc:ir*kc+mr*kc], a[(ic+ir)*lda+pc:], lda, min(mr, mc-ir), mr, kc, alpha)
	}
}

// packB copies op(B)[pc:pc+kc, jc:jc+nc] into nr-wide slivers: sliver s
// holds columns s·nr… as kc groups of nr values, zero-padded past nc.
func packB[T Float](dst []T, transB bool, b []T, ldb, pc, jc, kc, nc, nr int) {
	if !transB {
		// op(B)(p, j) = b[(pc+p)·ldb + jc+j]
		packRuns(dst, b[pc*ldb+jc:], ldb, nc, nr, kc, 1)
		return
	}
	for jr := 0; jr < nc; jr += nr {
		// op(B)(p, j) = b[(jc+j)·ldb + pc+p]
		packGather(dst[jr*kc:jr*kc+nr*kc], b[(jc+jr)*ldb+pc:], ldb, min(nr, nc-jr), nr, kc, 1)
	}
}

// packRuns fills the width-wide slivers of a block whose kc groups are
// rows of src: group p is alpha·src[p·ld : p·ld+n], its values s·width…
// going to sliver s (at dst[s·kc:], kc groups of width values), the last
// sliver zero-padded to width. Row by row across all the slivers, so that
// src is read sequentially: for 32-wide slivers of a 2048×2048 float32
// matrix that is 0.24 ns an element, sliver by sliver (kc short runs at
// stride ld each) 0.86, on Zen 4.
func packRuns[T Float](dst, src []T, ld, n, width, kc int, alpha T) {
	if alpha == 1 && isF32[T]() && packRuns32 != nil && width <= 32 && n > 0 && kc > 0 {
		// The same copy in assembly; the Go loop below spent most of its
		// time in copy's calls, one a run of 12 or 32 values (a
		// 256×512×4096 TN product on one Intel Xeon core: packing 17 %
		// of the time, 12 % in memmove).
		need := ((n+width-1)/width-1)*kc*width + kc*width
		if len(dst) < need || len(src) < (kc-1)*ld+n || ld < n {
			panic(fmt.Sprintf("cpu: gemm: packing %d runs of %d (ld %d) into %d-wide slivers: src has %d, dst %d elements", kc, n, ld, width, len(src), len(dst)))
		}
		packRuns32(asF32(dst), asF32(src), ld, n, width, kc)
		return
	}
	for p := 0; p < kc; p++ {
		sp := src[p*ld : p*ld+n]
		for s := 0; s < n; s += width {
			dp := dst[s*kc+p*width : s*kc+p*width+width]
			run := sp[s:min(s+width, n)]
			if alpha == 1 {
				copy(dp, run)
			} else {
				for i, v := range run {
					dp[i] = alpha * v
				}
			}
			clear(dp[len(run):])
		}
	}
}

// packRuns32 is packRuns's float32 copy (alpha 1, width ≤ 32) in
// assembly, where the CPU has one (pack_amd64.go); nil elsewhere.
var packRuns32 func(dst, src []float32, ld, n, width, kc int)

// packGather fills one sliver d (kc groups of width values) whose group p
// is alpha·(src[p], src[ld+p], …, src[(n−1)·ld+p]), zero-padded to width:
// n contiguous runs read side by side. width ≤ 32.
func packGather[T Float](d, src []T, ld, n, width, kc int, alpha T) {
	if n < width { // an edge sliver: zero it in one go, then fill
		clear(d[:kc*width])
	}
	// Four runs at a time, each read sequentially, their values stored
	// side by side with stride width: ~25 % faster than run by run (0.53
	// against 0.66 ns an element for 12- and 32-wide slivers from a
	// 512×512 float32 matrix, 1.0 against 1.6 from a 2048×2048 one, on
	// Zen 4), which in turn was as fast as all the runs side by side.
	i := 0
	for ; i+4 <= n; i += 4 {
		r0 := src[i*ld : i*ld+kc]
		r1 := src[(i+1)*ld : (i+1)*ld+kc][:len(r0)]
		r2 := src[(i+2)*ld : (i+2)*ld+kc][:len(r0)]
		r3 := src[(i+3)*ld : (i+3)*ld+kc][:len(r0)]
		di := d[i:]
		if alpha == 1 {
			for p, v := range r0 {
				q := di[p*width : p*width+4 : p*width+4]
				q[0], q[1], q[2], q[3] = v, r1[p], r2[p], r3[p]
			}
		} else {
			for p, v := range r0 {
				q := di[p*width : p*width+4 : p*width+4]
				q[0], q[1], q[2], q[3] = alpha*v, alpha*r1[p], alpha*r2[p], alpha*r3[p]
			}
		}
	}
	for ; i < n; i++ {
		di := d[i:]
		for p, v := range src[i*ld : i*ld+kc] {
			di[p*width] = alpha * v
		}
	}
}

// macroKernel multiplies the packed A block (mc×kc) by the packed B panel
// (kc×nc) into c (mc×nc, leading dimension ldc), tile by tile.
func macroKernel[T Float](kern *gemmKernel[T], w *gemmWork[T], mc, nc, kc int, c []T, ldc int, accumulate bool) {
	mr, nr := kern.mr, kern.nr
	for jr := 0; jr < nc; jr += nr {
		cols := min(nr, nc-jr)
		bs := w.b[jr*kc:]
		for ir := 0; ir < mc; ir += mr {
			rows := min(mr, mc-ir)
			as := w.a[ir*kc:]
			fn, width := kern.fn, nr
			if cols <= nr/2 && kern.half != nil {
				fn, width = kern.half, nr/2
			}
			if rows == mr && cols == width {
				fn(kc, as, bs, c[ir*ldc+jr:], ldc, accumulate)
				continue
			}
			// Edge tile: compute the full (or half) tile into scratch,
			// merge the part that exists.
			fn(kc, as, bs, w.tmp, nr, false)
			for i := 0; i < rows; i++ {
				dst := c[(ir+i)*ldc+jr:]
				dst = dst[:cols]
				src := w.tmp[i*nr : i*nr+cols]
				if accumulate {
					for j, v := range src {
						dst[j] += v
					}
				} else {
					copy(dst, src)
				}
			}
		}
	}
}

// microKernel2x4 is the portable micro-kernel: a 2×4 tile of C in eight
// scalars, one rank-1 update per step. Wider tiles spill: Go's register
// allocator keeps the sixteen accumulators of a 4×4 tile on the stack on
// amd64 (measured at 512³, one core: 2×4 6.3, 4×2 5.6, 4×4 3.4 GFLOP/s).
func microKernel2x4[T Float](k int, a, b, c []T, ldc int, accumulate bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13 T
	a, b = a[:2*k], b[:4*k]
	for p := 0; p < k; p++ {
		av := a[2*p : 2*p+2 : 2*p+2]
		bv := b[4*p : 4*p+4 : 4*p+4]
		a0, a1 := av[0], av[1]
		b0, b1, b2, b3 := bv[0], bv[1], bv[2], bv[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	r0 := c[0:4:4]
	r1 := c[ldc : ldc+4 : ldc+4]
	if accumulate {
		c00, c01, c02, c03 = c00+r0[0], c01+r0[1], c02+r0[2], c03+r0[3]
		c10, c11, c12, c13 = c10+r1[0], c11+r1[1], c12+r1[2], c13+r1[3]
	}
	r0[0], r0[1], r0[2], r0[3] = c00, c01, c02, c03
	r1[0], r1[1], r1[2], r1[3] = c10, c11, c12, c13
}

// gemmRef is the plain triple loop: the algorithmic reference the fast
// kernels are tested against.
func gemmRef[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s T
			for p := 0; p < k; p++ {
				var av, bv T
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}
