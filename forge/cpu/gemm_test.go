package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// gemmPaths runs fn once per gemm path that exists here: each pure-Go
// kernel set this CPU runs (go/avx512, go/avx2, go/go, see eachGemmKernel)
// and the loaded BLAS (if any).
func gemmPaths(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	initBLAS()
	t.Run("go", func(t *testing.T) {
		eachGemmKernel(t, fn)
	})
	t.Run("blas", func(t *testing.T) {
		ok, restore := useBLAS(true)
		defer restore()
		if !ok {
			t.Skip("no BLAS library loaded")
		}
		fn(t)
	})
}

// eachGemmKernel runs fn once per pure-Go kernel set this CPU runs, as a
// subtest named after it, with BLAS off and that set in use (put back
// afterwards). The kernel globals are swapped, so fn must not run in
// parallel with other tests.
func eachGemmKernel(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, s := range gemmKernelSets {
		t.Run(s.name, func(t *testing.T) {
			_, restoreBLAS := useBLAS(false)
			defer restoreBLAS()
			if activeBLAS.Load() != nil {
				t.Fatal("useBLAS(false) left a BLAS active")
			}
			defer swapGemmKernels(s)()
			fn(t)
		})
	}
}

// swapGemmKernels puts s in use and returns what puts the previous set back.
func swapGemmKernels(s gemmKernelSet) (restore func()) {
	k32, k64, name := kernel32, kernel64, goKernelName
	setGemmKernels(s)
	return func() { kernel32, kernel64, goKernelName = k32, k64, name }
}

func randSlice[T Float](r *rand.Rand, n int) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = T(r.Float64()*2 - 1)
	}
	return s
}

// maxRelDiff returns max |got−want| / (1 + |want|) over the m×n matrices.
func maxRelDiff[T Float](m, n int, got []T, ldg int, want []T, ldw int) float64 {
	worst := 0.0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			g, w := float64(got[i*ldg+j]), float64(want[i*ldw+j])
			d := math.Abs(g-w) / (1 + math.Abs(w))
			if math.IsNaN(d) {
				return math.Inf(1)
			}
			worst = max(worst, d)
		}
	}
	return worst
}

// toF64 converts s to float64 (a copy).
func toF64[T Float](s []T) []float64 {
	d := make([]float64, len(s))
	for i, v := range s {
		d[i] = float64(v)
	}
	return d
}

// tol32 is the float32 tolerance for a k-term dot product of values in
// [-1, 1], relative to 1+|result|: rounding errors grow like √k.
func tol32(k int) float64 { return 1e-6 * (1 + math.Sqrt(float64(k))) }

// unitRoundoff is u for T: 2⁻²⁴ for float32, 2⁻⁵³ for float64.
func unitRoundoff[T Float]() float64 {
	var z T
	if _, ok := any(z).(float32); ok {
		return 0x1p-24
	}
	return 0x1p-53
}

// gamma is γ_n = n·u/(1−n·u), which bounds |θ| for a product of n factors
// (1+δ_i)^±1 with |δ_i| ≤ u.
func gamma(n int, u float64) float64 {
	nu := float64(n) * u
	return nu / (1 - nu)
}

// gemmWant computes, in float64 from the inputs of a gemm (c as it is
// before the call), the reference result want = gemmRef and a bound on the
// error of any correct evaluation in T, element by element:
//
//	|got − want| ≤ (γ_{k+2} + γ'_{k+2}) · (|alpha|·Σ_p |a_ip||b_pj| + |beta·c_ij|)
//
// with γ for T and γ' for float64 (the reference's own error). A k-term
// dot product summed in any order, with or without FMA, has each product
// pass through at most k roundings; one more applies alpha (to A as it is
// packed, or to the sum) and one more covers beta·C and the way partial
// sums reach C (the Go path runs a kc-step FMA chain from zero and adds it
// to C per kc block: kc + ⌈k/kc⌉ + 1 ≤ k + 2 roundings for kc ≥ 2).
func gemmWant[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) (want, bound []float64) {
	want = toF64(c)
	gemmRef(transA, transB, m, n, k, float64(alpha), toF64(a), lda, toF64(b), ldb, float64(beta), want, ldc)
	// |op(A)| row by row and |op(B)| column by column, so that the sums of
	// |a_ip||b_pj| are dot products of contiguous slices.
	absA, absB := make([]float64, m*k), make([]float64, n*k)
	for p := 0; p < k; p++ {
		for i := 0; i < m; i++ {
			if transA {
				absA[i*k+p] = math.Abs(float64(a[p*lda+i]))
			} else {
				absA[i*k+p] = math.Abs(float64(a[i*lda+p]))
			}
		}
		for j := 0; j < n; j++ {
			if transB {
				absB[j*k+p] = math.Abs(float64(b[j*ldb+p]))
			} else {
				absB[j*k+p] = math.Abs(float64(b[p*ldb+j]))
			}
		}
	}
	u64 := unitRoundoff[float64]()
	g := (gamma(k+2, unitRoundoff[T]()) + gamma(k+2, u64)) * (1 + gamma(k+2, u64))
	bound = make([]float64, len(c))
	for i := 0; i < m; i++ {
		ai := absA[i*k : i*k+k]
		for j := 0; j < n; j++ {
			bj := absB[j*k : j*k+k][:len(ai)]
			var s float64
			for p, v := range ai {
				s += v * bj[p]
			}
			x := math.Abs(float64(alpha)) * s
			if beta != 0 {
				x += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			bound[i*ldc+j] = g * x
		}
	}
	return want, bound
}

// gemmErr returns the element of the m×n result got (leading dimension
// ld, like want and bound) whose error is the largest fraction of its
// bound, and that fraction (+Inf for NaN, or an error where the bound is
// 0). ratio > 1 is a wrong result.
func gemmErr[T Float](m, n int, got []T, ld int, want, bound []float64) (i, j int, ratio float64) {
	ratio = -1
	for r := 0; r < m; r++ {
		for c := 0; c < n; c++ {
			x := r*ld + c
			d := math.Abs(float64(got[x]) - want[x])
			q := 0.0
			switch {
			case math.IsNaN(d):
				q = math.Inf(1)
			case d > 0:
				q = d / bound[x] // +Inf when the bound is 0
			}
			if q > ratio {
				i, j, ratio = r, c, q
			}
		}
	}
	return i, j, max(ratio, 0)
}

// gemmCase checks gemm against gemmRef, computed in float64 from the same
// inputs, within the error bound of gemmWant, for one configuration:
// leading dimensions padded by pad, C filled with NaN when beta is 0 (it
// must not be read), and the padding of C left untouched.
func gemmCase[T Float](t *testing.T, r *rand.Rand, transA, transB bool, m, n, k, pad int, alpha, beta T) {
	t.Helper()
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+pad, bc+pad, n+pad
	a := randSlice[T](r, max(ar*lda, 1))
	b := randSlice[T](r, max(br*ldb, 1))
	c := randSlice[T](r, m*ldc)
	if beta == 0 {
		for i := range c {
			c[i] = T(math.NaN())
		}
	}
	for i := 0; i < m; i++ { // sentinel in the padding
		for j := n; j < ldc; j++ {
			c[i*ldc+j] = 7
		}
	}
	want, bound := gemmWant(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	if i, j, q := gemmErr(m, n, c, ldc, want, bound); q > 1 {
		x := i*ldc + j
		t.Fatalf("gemm %T transA=%v transB=%v m=%d n=%d k=%d pad=%d alpha=%v beta=%v: C(%d, %d) = %v, reference %v: error %.3g times the bound %.3g",
			alpha, transA, transB, m, n, k, pad, alpha, beta, i, j, c[x], want[x], q, bound[x])
	}
	for i := 0; i < m; i++ {
		for j := n; j < ldc; j++ {
			if c[i*ldc+j] != 7 {
				t.Fatalf("gemm wrote into the padding of C at (%d, %d)", i, j)
			}
		}
	}
}

var oddSizes = []int{1, 3, 17, 65, 130}

func TestGemmFloat64(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, m := range oddSizes {
					for _, n := range oddSizes {
						for _, k := range oddSizes {
							gemmCase[float64](t, r, ta, tb, m, n, k, (m+n+k)%3, 1, 0)
						}
					}
				}
			}
		}
	})
}

func TestGemmAlphaBeta(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, ab := range [][2]float64{{1, 1}, {0.5, 1}, {-2, 0.25}, {1.5, 0}, {0, 2}, {0, 0}} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					gemmCase[float64](t, r, ta, tb, 37, 29, 300, 2, ab[0], ab[1])
					gemmCase[float64](t, r, ta, tb, 5, 7, 0, 0, ab[0], ab[1]) // k = 0: C = beta·C
					gemmCase[float32](t, r, ta, tb, 37, 29, 300, 2, float32(ab[0]), float32(ab[1]))
					gemmCase[float32](t, r, ta, tb, 5, 7, 0, 0, float32(ab[0]), float32(ab[1]))
				}
			}
		}
	})
}

func TestGemmFloat32(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, sz := range [][3]int{{1, 1, 1}, {3, 17, 65}, {65, 130, 17}, {130, 65, 3}, {200, 300, 600}} {
					gemmCase[float32](t, r, ta, tb, sz[0], sz[1], sz[2], 1, 1, 0)
					gemmCase[float32](t, r, ta, tb, sz[0], sz[1], sz[2], 0, 1, 1)
				}
			}
		}
	})
}

// TestGemmSmallShapes runs every m×n up to 40×40 (across the edges of
// the 6-, 12-, 16- and 32-wide tiles), k from 1 to 23 (every remainder of
// the kernels' k unrolling), cycling through the four transposes, alpha,
// beta and padded leading dimensions.
func TestGemmSmallShapes(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 22))
		alphas := []float64{1, -0.75, 1.5}
		betas := []float64{0, 1, -0.5, 2}
		i := 0
		for m := 1; m <= 40; m++ {
			for n := 1; n <= 40; n++ {
				i++
				k := 1 + (3*m+5*n+i/7)%23
				ta, tb := i%4 >= 2, i%2 == 1
				alpha, beta := alphas[i%3], betas[(i/4)%4]
				gemmCase[float32](t, r, ta, tb, m, n, k, (m+n)%3, float32(alpha), float32(beta))
				gemmCase[float64](t, r, ta, tb, m, n, k, (m+2*n)%3, alpha, beta)
			}
		}
	})
}

// TestGemmLargeShapes: sizes 97, 250 and 513 (not multiples of any tile
// dimension or unrolling), k beyond kc, all four transposes, alpha ≠ 1 and
// beta 0, 1 and neither.
func TestGemmLargeShapes(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(23, 24))
		shapes := [][3]int{{97, 250, 37}, {513, 33, 97}, {40, 513, 250}, {250, 97, 513},
			{13, 35, 2*kernel32.kc + 3}, {25, 31, 2*kernel64.kc + 1}}
		ab := [][2]float64{{1, 0}, {-1.25, 1}, {0.75, 0.5}}
		for si, sh := range shapes {
			for tr := 0; tr < 4; tr++ {
				ta, tb := tr >= 2, tr%2 == 1
				x := ab[(si+tr)%3]
				gemmCase[float32](t, r, ta, tb, sh[0], sh[1], sh[2], tr%3, float32(x[0]), float32(x[1]))
				y := ab[(si+tr+1)%3]
				gemmCase[float64](t, r, ta, tb, sh[0], sh[1], sh[2], (tr+1)%3, y[0], y[1])
			}
		}
	})
}

// TestGemmBlocking crosses every cache-block boundary of the Go kernel
// (kc, mc, nc) so that the K-loop accumulation and edge tiles are covered.
func TestGemmBlocking(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		k32, k64 := kernel32, kernel64
		gemmCase[float32](t, r, false, false, k32.mc+5, 37, 2*k32.kc+7, 0, 1, 0)
		gemmCase[float32](t, r, false, true, 7, k32.nc+k32.nr+3, k32.kc+5, 2, -0.5, 1)
		gemmCase[float32](t, r, true, true, k32.mc*2+1, 33, k32.kc+1, 1, 1, 1)
		gemmCase[float64](t, r, false, true, k64.mc+1, 19, k64.kc+1, 0, 1, 0)
		gemmCase[float64](t, r, true, false, 5, k64.nc+1, k64.kc+1, 1, 1, 0.5)
		gemmCase[float64](t, r, true, false, 2*k64.mc+k64.mr-1, 40, 2*k64.kc, 3, 0.5, 1)
	})
}

// TestGemmSplitBitIdentical: the product computed as row blocks, or as
// column blocks, cut at arbitrary boundaries (not multiples of the tile),
// is bit for bit the unsplit product, for every kernel — MatMul relies on
// it when it shares a product out between workers.
func TestGemmSplitBitIdentical(t *testing.T) {
	eachGemmKernel(t, func(t *testing.T) {
		splitBitIdentical[float32](t, kernel32.kc)
		splitBitIdentical[float64](t, kernel64.kc)
	})
}

func splitBitIdentical[T Float](t *testing.T, kc int) {
	t.Helper()
	r := rand.New(rand.NewPCG(25, 26))
	m, n, k := 101, 77, kc+45
	for tr := 0; tr < 4; tr++ {
		transA, transB := tr >= 2, tr%2 == 1
		for _, ab := range [][2]T{{1, 0}, {0.75, 1}, {-1.25, 0.5}} {
			alpha, beta := ab[0], ab[1]
			lda, ldb, ldc := k+1, n+2, n+3
			if transA {
				lda = m + 1
			}
			if transB {
				ldb = k + 2
			}
			a := randSlice[T](r, max(m, k)*lda)
			b := randSlice[T](r, max(k, n)*ldb)
			c0 := randSlice[T](r, m*ldc)
			whole := append([]T(nil), c0...)
			gemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, whole, ldc)
			for _, byRows := range []bool{true, false} {
				ext := n
				if byRows {
					ext = m
				}
				cuts := []int{0, 1 + r.IntN(ext/3), 0, 0, ext}
				cuts[2] = cuts[1] + 1 + r.IntN(ext/3)
				cuts[3] = cuts[2] + 1 + r.IntN(ext-cuts[2]-1)
				c := append([]T(nil), c0...)
				for p := 0; p+1 < len(cuts); p++ {
					lo, hi := cuts[p], cuts[p+1]
					if byRows { // rows lo..hi of op(A) and C
						ao := lo * lda
						if transA {
							ao = lo
						}
						gemmGo(transA, transB, hi-lo, n, k, alpha, a[ao:], lda, b, ldb, beta, c[lo*ldc:], ldc)
					} else { // columns lo..hi of op(B) and C
						bo := lo
						if transB {
							bo = lo * ldb
						}
						gemmGo(transA, transB, m, hi-lo, k, alpha, a, lda, b[bo:], ldb, beta, c[lo:], ldc)
					}
				}
				for i := range c {
					if math.Float64bits(float64(c[i])) != math.Float64bits(float64(whole[i])) {
						t.Fatalf("%T transA=%v transB=%v alpha=%v beta=%v, split by rows=%v at %v: C(%d, %d) = %v, unsplit %v",
							alpha, transA, transB, alpha, beta, byRows, cuts, i/ldc, i%ldc, c[i], whole[i])
					}
				}
			}
		}
	}
}

// TestGemmDetectsErrors makes sure the comparison can fail: a result
// perturbed in one element, a transposed read, and a product missing its
// last term must be caught.
func TestGemmDetectsErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 17, 65, 3
	a, b := randSlice[float64](r, m*k), randSlice[float64](r, k*n)
	c := make([]float64, m*n)
	want, bound := gemmWant(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	if _, _, q := gemmErr(m, n, c, n, want, bound); q > 1 {
		t.Fatalf("error %g times the bound", q)
	}
	c[5*n+40] += 1e-9
	if i, j, q := gemmErr(m, n, c, n, want, bound); q <= 1 || i != 5 || j != 40 {
		t.Fatalf("a perturbed result was not detected (C(%d, %d), %g times the bound)", i, j, q)
	}
	// And the transposed read really differs from the plain one.
	gemm(true, false, m, n, k, 1, a, m, b, n, 0, c, n)
	if _, _, q := gemmErr(m, n, c, n, want, bound); q <= 1 {
		t.Fatal("transA gave the same result as no transpose")
	}
	// The float32 bound at k = 513 is tight enough to see one term missing.
	m, n, k = 20, 30, 513
	a32, b32 := randSlice[float32](r, m*k), randSlice[float32](r, k*n)
	c32 := make([]float32, m*n)
	want, bound = gemmWant(false, false, m, n, k, 1, a32, k, b32, n, 0, c32, n)
	gemm(false, false, m, n, k-1, 1, a32, k, b32, n, 0, c32, n)
	if _, _, q := gemmErr(m, n, c32, n, want, bound); q <= 1 {
		t.Fatalf("a float32 product without its last term was within the bound (%g)", q)
	}
}

func TestGemmConcurrent(t *testing.T) {
	gemmPaths(t, func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 11))
				m, n, k := 40+g, 50-g, 64
				a, b := randSlice[float32](r, m*k), randSlice[float32](r, n*k)
				c := make([]float32, m*n)
				want, bound := gemmWant(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
				for it := 0; it < 50; it++ {
					clear(c)
					gemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
					if _, _, q := gemmErr(m, n, c, n, want, bound); q > 1 {
						errs <- fmt.Errorf("goroutine %d: error %g times the bound", g, q)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

func TestGemmNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects under the race detector")
	}
	gemmPaths(t, func(t *testing.T) {
		m, n, k := 64, 64, 64
		a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
		gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		if allocs := testing.AllocsPerRun(100, func() {
			gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
		}); allocs > 0 {
			t.Fatalf("gemm allocates %.1f times per call", allocs)
		}
	})
}

func TestGemmShortSlicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("gemm with a too-short C did not panic")
		}
	}()
	a, b, c := make([]float32, 16), make([]float32, 16), make([]float32, 15)
	gemm(false, false, 4, 4, 4, 1, a, 4, b, 4, 0, c, 4)
}

func TestVariant(t *testing.T) {
	be := New()
	_, restore := useBLAS(false)
	if v := be.Variant("matmul"); v != goKernelName || !slices.Contains([]string{"go", "go-avx2", "go-avx512"}, v) {
		t.Errorf("Variant(matmul) without BLAS = %q", v)
	}
	restore()
	eachGemmKernel(t, func(t *testing.T) {
		want := "go-" + kernelSetInUse().name
		if want == "go-go" {
			want = "go"
		}
		if v := be.Variant("matmul"); v != want {
			t.Errorf("Variant(matmul) = %q, want %q", v, want)
		}
	})
	if ok, restore := useBLAS(true); ok {
		if v := be.Variant("matmul"); v != loadedBLAS.name {
			t.Errorf("Variant(matmul) with BLAS = %q, want %q", v, loadedBLAS.name)
		}
		restore()
	}
	t.Logf("matmul variant: %s (BLAS loaded: %v)", be.Variant("matmul"), loadedBLAS != nil)
}

// kernelSetInUse is the entry of gemmKernelSets whose variant is in use.
func kernelSetInUse() gemmKernelSet {
	for _, s := range gemmKernelSets {
		if s.variant == goKernelName {
			return s
		}
	}
	panic("no kernel set has variant " + goKernelName)
}

func TestChooseGemmKernels(t *testing.T) {
	sets := []gemmKernelSet{{name: "avx2"}, {name: "go"}}
	for _, c := range []struct {
		env, use string
		warn     []string // substrings of the warning; nil: none
	}{
		{"", "avx2", nil},
		{"go", "go", nil},
		{" AVX2 ", "avx2", nil},
		{"avx512", "avx2", []string{`"avx512"`, "cannot run", "avx2, go", "using avx2"}},
		{"fast", "avx2", []string{`"fast"`, "avx512, avx2, go", "using avx2"}},
	} {
		use, warn := chooseGemmKernels(sets, c.env)
		if use.name != c.use {
			t.Errorf("FORGE_GEMM_KERNEL=%q: uses %q, want %q", c.env, use.name, c.use)
		}
		if (warn != "") != (c.warn != nil) || strings.Contains(warn, "\n") {
			t.Errorf("FORGE_GEMM_KERNEL=%q: warning %q", c.env, warn)
		}
		for _, w := range c.warn {
			if !strings.Contains(warn, w) {
				t.Errorf("FORGE_GEMM_KERNEL=%q: warning %q does not say %q", c.env, warn, w)
			}
		}
	}
}

// BenchmarkGemmGo512 measures the pure-Go kernel on one core.
func BenchmarkGemmGo512(b *testing.B) {
	_, restore := useBLAS(false)
	defer restore()
	benchGemm(b, 512)
}

func BenchmarkGemmBLAS512(b *testing.B) {
	ok, restore := useBLAS(true)
	defer restore()
	if !ok {
		b.Skip("no BLAS")
	}
	benchGemm(b, 512)
}

func benchGemm(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(1, 1))
	x, y, z := randSlice[float32](r, n*n), randSlice[float32](r, n*n), make([]float32, n*n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		gemm(false, false, n, n, n, 1, x, n, y, n, 0, z, n)
	}
	b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkGemmSmall compares the two paths on the small products the
// attention kernel issues (q·kᵀ tiles), to place blasMinWork.
func BenchmarkGemmSmall(b *testing.B) {
	for _, n := range []int{4, 8, 16, 32, 64} {
		for _, path := range []string{"go", "blas"} {
			b.Run(fmt.Sprintf("%s/%d", path, n), func(b *testing.B) {
				ok, restore := useBLAS(path == "blas")
				defer restore()
				if !ok {
					b.Skip("no BLAS")
				}
				r := rand.New(rand.NewPCG(1, 1))
				x, y, z := randSlice[float32](r, n*n), randSlice[float32](r, n*n), make([]float32, n*n)
				for i := 0; i < b.N; i++ {
					gemm(false, true, n, n, n, 1, x, n, y, n, 0, z, n)
				}
				b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkGemmKernels measures single-threaded gemm (run with -cpu 1) per
// pure-Go kernel set this CPU runs and through the loaded BLAS, float32 NN
// at 256³…2048³, NT and TN at 1024³, and float64 NN at 512³ and 1024³.
// The portable kernel runs at the two smallest sizes only.
func BenchmarkGemmKernels(bb *testing.B) {
	type shape struct {
		dtype          string
		transA, transB bool
		n              int
	}
	var shapes []shape
	for _, n := range []int{256, 512, 1024, 2048} {
		shapes = append(shapes, shape{"f32", false, false, n})
	}
	shapes = append(shapes, shape{"f32", false, true, 1024}, shape{"f32", true, false, 1024},
		shape{"f64", false, false, 512}, shape{"f64", false, false, 1024})
	paths := []string{}
	for _, s := range gemmKernelSets {
		paths = append(paths, s.name)
	}
	paths = append(paths, "blas")
	initBLAS()
	for _, sh := range shapes {
		tr := map[bool]string{false: "N", true: "T"}
		for _, path := range paths {
			name := fmt.Sprintf("%s/%s%s/%d/%s", sh.dtype, tr[sh.transA], tr[sh.transB], sh.n, path)
			bb.Run(name, func(bb *testing.B) {
				ok, restoreBLAS := useBLAS(path == "blas")
				defer restoreBLAS()
				if !ok {
					bb.Skip("no BLAS")
				}
				if path != "blas" {
					if path == "go" && sh.n > 512 {
						bb.Skip("the portable kernel takes seconds a product")
					}
					for _, s := range gemmKernelSets {
						if s.name == path {
							defer swapGemmKernels(s)()
						}
					}
				}
				if sh.dtype == "f32" {
					benchGemmShape[float32](bb, sh.transA, sh.transB, sh.n)
				} else {
					benchGemmShape[float64](bb, sh.transA, sh.transB, sh.n)
				}
			})
		}
	}
}

func benchGemmShape[T Float](b *testing.B, transA, transB bool, n int) {
	r := rand.New(rand.NewPCG(1, 1))
	x, y, z := randSlice[T](r, n*n), randSlice[T](r, n*n), make([]T, n*n)
	gemm(transA, transB, n, n, n, 1, x, n, y, n, 0, z, n)
	for b.Loop() {
		gemm(transA, transB, n, n, n, 1, x, n, y, n, 0, z, n)
	}
	b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
