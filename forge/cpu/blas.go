package cpu

// BLAS for the matmul kernels, loaded at run time with purego (no cgo):
// OpenBLAS on Linux, Accelerate on macOS. Where no library loads, or when
// FORGE_BLAS=off, gemm runs the pure-Go kernel of gemm.go instead.
//
// # Calling convention
//
// We call the Fortran entry points sgemm_/dgemm_ rather than cblas_*: every
// argument is a pointer, so one purego.SyscallN with uintptr arguments does
// the call (~75 ns, no allocation), where RegisterLibFunc on cblas_sgemm
// costs ~250 ns and a dozen allocations. Fortran is column-major; a
// row-major C = op(A)·op(B) is the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, so the
// call swaps the operands (and m with n) and keeps each transpose flag.
// Integers are 32-bit (the LP64 interface both libraries export). The two
// hidden CHARACTER lengths that gfortran-compiled BLAS may expect are passed
// at the end; C implementations ignore them.
//
// # Threads
//
// OpenBLAS runs at one thread (openblas_set_num_threads(1)) and Go owns the
// threads: gemm is single-threaded and safe to call from any number of
// goroutines at once (the attention kernel calls it on tiles from its
// workers), and MatMul gives whole products to its workers when a batch has
// enough of them, or splits a product that cannot be shared out that way
// (a single large matmul, or a few) into one row or column block per
// worker, each a single-threaded call. Where the Go kernel is the AVX-512
// one, MatMul's products that are not small run on it rather than on the
// library, which keeps attention's tiles (goOverBLAS in matmul.go).
//
// A lone product alone is faster on OpenBLAS's own threads (one call with
// openblas_set_num_threads(GOMAXPROCS)): splitting it into one
// single-threaded call per worker was measured 3–44 % slower in isolation
// (table below). Inside a training step it is the other way round, and by
// far: after a threaded call OpenBLAS's worker thread keeps spinning
// (sched_yield) for 2^28 TSC cycles, ~70 ms, on one of our two cores, so
// every Go-parallel kernel that follows (attention, norms, elementwise,
// the optimizer) runs at about half speed. Measured on the tiny GPT step
// (fwd + bwd + AdamW, 2 Zen 4 cores, profile of 5 steps): threaded lone
// products 209 ms a step (matmul 92 ms, attention 22 ms), Go-split
// products 170 ms (matmul 82 ms, attention 12.6 ms). So the threaded call
// is off by default; blasLoneThreads (FORGE_BLAS_THREADED=1) turns it back
// on for programs made of large lone products. Such a call holds blasMu
// exclusively, so no other BLAS call overlaps it, and the count goes back
// to one before the lock is released.
//
// Measured on 2 Zen 4 cores, float32 GFLOP/s of one product alone,
// medians of 9 interleaved rounds on an idle machine, numpy (its own
// 2-thread OpenBLAS) in the same run:
//
//	M×N×K                 Go split, 1-thread calls   one 2-thread call   numpy
//	256³                           110                     158            165
//	1024³                          153                     181            167
//	2048³                          192                     198            200
//	4096×256×1024 NN               151                     173            177
//	4096×1024×256 NT               153                     172            166
//	256×1024×4096 TN               145                     173            148
//
// One thread on half of the 1024³ product runs at 95 GFLOP/s, so the split
// loses ~13 % to running two independent single-threaded calls side by
// side (each packs all of B itself, where a threaded OpenBLAS packs it once
// for both threads); the 2-thread call gets 195 in the same test.
//
// Accelerate runs its own threads (and on Apple silicon the matrix units)
// and cannot be limited to one thread, so with Accelerate MatMul makes one
// call per product from the calling goroutine and lets it parallelise.
// Other BLAS libraries (libblas.so.3 that is not OpenBLAS) are treated as
// single-threaded: MatMul splits products between its workers.

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// blasLibrary is a loaded BLAS.
type blasLibrary struct {
	name  string  // "openblas-<core>", "openblas", "accelerate" or "blas"; the matmul variant
	path  string  // what was opened
	sgemm uintptr // Fortran sgemm_
	dgemm uintptr // Fortran dgemm_

	// version is "OpenBLAS 0.3.21" where the library says; core the kernel
	// set it runs (openblas_get_corename) and coreWhy who chose it and why
	// (blas_core.go).
	version, core, coreWhy string
	userCore               bool // core set by the user's OPENBLAS_CORETYPE

	// setThreads and getThreads are openblas_set/get_num_threads (0 if
	// absent: not an OpenBLAS).
	setThreads, getThreads uintptr

	// ownThreads: the library parallelises one call itself (Accelerate).
	// MatMul then makes one call per product and never splits it.
	ownThreads bool
}

// blasLoneThreads makes MatMul run a product that its workers cannot share
// out as whole products on OpenBLAS's own threads instead of splitting it
// (see Threads above). Set from FORGE_BLAS_THREADED=1 at start-up.
var blasLoneThreads = os.Getenv("FORGE_BLAS_THREADED") == "1"

var (
	blasOnce   sync.Once
	loadedBLAS *blasLibrary                // what initBLAS found; nil if none
	activeBLAS atomic.Pointer[blasLibrary] // what gemm uses; nil: pure Go

	blasDisabled bool   // FORGE_BLAS=off
	blasNote     string // said once on stderr when the library runs slower kernels than the CPU allows
	blasBypassed bool   // the loaded library's kernels are narrower than the Go kernel's: gemm runs Go
)

// blasCandidates lists the libraries tried in order on this OS.
func blasCandidates() []string {
	switch runtime.GOOS {
	case "darwin":
		return []string{"/System/Library/Frameworks/Accelerate.framework/Accelerate"}
	case "linux", "freebsd", "netbsd":
		return []string{"libopenblas.so.0", "libblas.so.3"}
	}
	return nil
}

// initBLAS loads a BLAS library once per process. FORGE_BLAS=off (or 0,
// false, go) forces the pure-Go matmul; FORGE_BLAS=<path> tries only that
// library.
func initBLAS() {
	blasOnce.Do(func() {
		env := strings.TrimSpace(os.Getenv("FORGE_BLAS"))
		switch strings.ToLower(env) {
		case "off", "0", "false", "no", "go":
			blasDisabled = true
			return
		}
		paths := blasCandidates()
		if env != "" && !strings.EqualFold(env, "on") && !strings.EqualFold(env, "auto") {
			paths = []string{env}
		}
		var errs []string
		for _, p := range paths {
			lib, err := openBLAS(p)
			if err != nil {
				msg := err.Error()
				if !strings.Contains(msg, p) { // dlerror usually names the file
					msg = p + ": " + msg
				}
				errs = append(errs, msg)
				continue
			}
			loadedBLAS = lib
			if narrowerThanGo(lib) {
				// The library is kept loaded (tests and FORGE_BLAS paths can
				// still reach it) but gemm runs the Go kernel.
				blasBypassed = true
				blasNote += "; forge's own " + goKernelName + " matmul runs instead"
			} else {
				activeBLAS.Store(lib)
			}
			if blasNote != "" {
				fmt.Fprintln(os.Stderr, blasNote)
			}
			return
		}
		if len(errs) == 0 {
			errs = append(errs, "no candidates on "+runtime.GOOS)
		}
		fmt.Fprintf(os.Stderr, "forge: cpu: no BLAS library found (%s); using the pure-Go matmul (slower)\n",
			strings.Join(errs, "; "))
	})
}

// Variant names the code path a kernel's last call on b took: for
// "matmul", the BLAS library ("openblas-SkylakeX" — OpenBLAS and the
// kernels it runs —, "accelerate", "blas") or the pure-Go kernel ("go",
// or "go-avx512", "go-avx2" for its assembly micro-kernels) — with a
// library loaded a product may run on the Go kernel (goOverBLAS) —, and
// before any product the library's (LibraryVariant). Other kernels
// return "go".
func (b *Backend) Variant(kernel string) string {
	if kernel == "matmul" {
		if p := b.matmulPath.Load(); p != nil {
			return *p
		}
		return LibraryVariant()
	}
	return "go"
}

// LibraryVariant names the matmul path large products take: the BLAS
// library's (see Variant), or the Go kernel's without one.
func LibraryVariant() string {
	if lib := activeBLAS.Load(); lib != nil {
		return lib.name
	}
	return goKernelName
}

// useBLAS switches gemm between the loaded BLAS (on) and the pure-Go kernel
// (off) and returns a function restoring the previous state. It is for
// tests and benchmarks; it reports false if on was asked and no BLAS loaded.
func useBLAS(on bool) (ok bool, restore func()) {
	initBLAS()
	prev := activeBLAS.Load()
	restore = func() { activeBLAS.Store(prev) }
	if !on {
		activeBLAS.Store(nil)
		return true, restore
	}
	if loadedBLAS == nil {
		return false, restore
	}
	activeBLAS.Store(loadedBLAS)
	return true, restore
}

// gemmArgs holds the arguments of one Fortran ?gemm_ call. Fortran takes
// every argument by reference, so the scalars live in a pooled heap object
// whose field addresses are passed; argv is the argument vector itself, so
// that SyscallN gets an existing slice and nothing is allocated per call.
// ptr holds the matrices' data pointers for the duration of the call: as
// unsafe.Pointers in a heap object they keep the matrices alive and make
// escape analysis put them on the heap (a stack copy could move under a
// uintptr).
type gemmArgs struct {
	transA, transB byte // 'N' or 'T'
	m, n, k        int32
	lda, ldb, ldc  int32
	alpha32        float32
	beta32         float32
	alpha64        float64
	beta64         float64
	ptr            [3]unsafe.Pointer // A, B, C as passed (Fortran order)
	argv           [15]uintptr
}

var gemmArgsPool = sync.Pool{New: func() any { return new(gemmArgs) }}

// blasFits reports whether the row-major product can be passed to Fortran
// BLAS as is: sizes fit in int32 and each leading dimension is at least the
// row length the BLAS argument checks demand.
func blasFits(transA, transB bool, m, n, k, lda, ldb, ldc int) bool {
	const lim = 1<<31 - 1
	if m > lim || n > lim || k > lim || lda > lim || ldb > lim || ldc > lim {
		return false
	}
	// Column-major, the first operand is op(B)ᵀ with ld ≥ rows of the
	// stored matrix, i.e. the row length of the row-major B.
	if transB {
		if ldb < max(k, 1) {
			return false
		}
	} else if ldb < max(n, 1) {
		return false
	}
	if transA {
		if lda < max(m, 1) {
			return false
		}
	} else if lda < max(k, 1) {
		return false
	}
	return ldc >= max(n, 1)
}

func trans(t bool) byte {
	if t {
		return 'T'
	}
	return 'N'
}

// blasMu orders BLAS calls around changes of OpenBLAS's thread count:
// single-threaded calls hold it shared (any number run at once), a call on
// the library's own threads holds it exclusively, so such a call never
// overlaps another BLAS call and always finds the count it set.
var blasMu sync.RWMutex

// blasCall runs blasGemm, on threads OpenBLAS threads when threads > 1
// and the library can be told so, else on the calling thread.
func blasCall[T Float](lib *blasLibrary, threads int, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if threads > 1 && lib.setThreads != 0 {
		blasMu.Lock()
		defer blasMu.Unlock()
		lib.setBLASThreads(threads)
		defer lib.setBLASThreads(1)
		blasGemm(lib, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	blasMu.RLock()
	defer blasMu.RUnlock()
	blasGemm(lib, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// blasGemm computes the row-major C = alpha·op(A)·op(B) + beta·C through
// the library's Fortran gemm. The caller has checked blasFits, m, n, k > 0
// and the slice extents.
func blasGemm[T Float](lib *blasLibrary, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	g := gemmArgsPool.Get().(*gemmArgs)
	// Column-major Cᵀ (n×m) = op(B)ᵀ (n×k) · op(A)ᵀ (k×m).
	g.transA, g.transB = trans(transB), trans(transA)
	g.m, g.n, g.k = int32(n), int32(m), int32(k)
	g.lda, g.ldb, g.ldc = int32(ldb), int32(lda), int32(ldc)
	var fn uintptr
	var alphaP, betaP unsafe.Pointer
	switch any(alpha).(type) {
	case float32:
		g.alpha32, g.beta32 = float32(alpha), float32(beta)
		fn, alphaP, betaP = lib.sgemm, unsafe.Pointer(&g.alpha32), unsafe.Pointer(&g.beta32)
	default:
		g.alpha64, g.beta64 = float64(alpha), float64(beta)
		fn, alphaP, betaP = lib.dgemm, unsafe.Pointer(&g.alpha64), unsafe.Pointer(&g.beta64)
	}
	g.ptr = [3]unsafe.Pointer{unsafe.Pointer(&b[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&c[0])}
	g.argv = [15]uintptr{
		uintptr(unsafe.Pointer(&g.transA)), uintptr(unsafe.Pointer(&g.transB)),
		uintptr(unsafe.Pointer(&g.m)), uintptr(unsafe.Pointer(&g.n)), uintptr(unsafe.Pointer(&g.k)),
		uintptr(alphaP), uintptr(g.ptr[0]), uintptr(unsafe.Pointer(&g.lda)),
		uintptr(g.ptr[1]), uintptr(unsafe.Pointer(&g.ldb)),
		uintptr(betaP), uintptr(g.ptr[2]), uintptr(unsafe.Pointer(&g.ldc)),
		1, 1, // hidden lengths of the two CHARACTER*1 arguments
	}
	callGemm(fn, g.argv[:])
	g.ptr = [3]unsafe.Pointer{}
	runtime.KeepAlive(g)
	gemmArgsPool.Put(g)
}
