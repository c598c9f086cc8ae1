package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// gemmPaths runs fn once per gemm path that exists here: the loaded BLAS
// (if any) and the pure-Go kernel.
func gemmPaths(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	initBLAS()
	t.Run("go", func(t *testing.T) {
		_, restore := useBLAS(false)
		defer restore()
		if activeBLAS.Load() != nil {
			t.Fatal("useBLAS(false) left a BLAS active")
		}
		fn(t)
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

// gemmCase checks gemm against gemmRef, computed in float64 from the same
// inputs, for one configuration: leading
// dimensions padded by pad, C filled with NaN when beta is 0 (it must not
// be read), and the padding of C left untouched.
func gemmCase[T Float](t *testing.T, r *rand.Rand, transA, transB bool, m, n, k, pad int, alpha, beta T, tol float64) {
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
	want := toF64(c)
	if beta == 0 {
		clear(want)
	}
	gemmRef(transA, transB, m, n, k, float64(alpha), toF64(a), lda, toF64(b), ldb, float64(beta), want, ldc)
	gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	if d := maxRelDiff(m, n, toF64(c), ldc, want, ldc); d > tol {
		t.Fatalf("gemm transA=%v transB=%v m=%d n=%d k=%d pad=%d alpha=%v beta=%v: max rel diff %.3g > %.3g",
			transA, transB, m, n, k, pad, alpha, beta, d, tol)
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
							gemmCase[float64](t, r, ta, tb, m, n, k, (m+n+k)%3, 1, 0, 1e-13)
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
					gemmCase[float64](t, r, ta, tb, 37, 29, 300, 2, ab[0], ab[1], 1e-13)
					gemmCase[float64](t, r, ta, tb, 5, 7, 0, 0, ab[0], ab[1], 1e-13) // k = 0: C = beta·C
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
					gemmCase[float32](t, r, ta, tb, sz[0], sz[1], sz[2], 1, 1, 0, tol32(sz[2]))
					gemmCase[float32](t, r, ta, tb, sz[0], sz[1], sz[2], 0, 1, 1, tol32(sz[2]))
				}
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
		gemmCase[float32](t, r, false, false, k32.mc+5, k32.nc+k32.nr+3, 2*k32.kc+7, 0, 1, 0, tol32(2*k32.kc+7))
		gemmCase[float32](t, r, true, true, k32.mc*2+1, 33, k32.kc+1, 1, 1, 1, tol32(k32.kc+1))
		gemmCase[float64](t, r, false, true, k64.mc+1, k64.nc+1, k64.kc+1, 0, 1, 0, 1e-13)
		gemmCase[float64](t, r, true, false, 2*k64.mc+k64.mr-1, 40, 2*k64.kc, 3, 0.5, 1, 1e-13)
	})
}

// TestGemmDetectsErrors makes sure the comparison can fail: a result
// perturbed in one element must be caught.
func TestGemmDetectsErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 17, 65, 3
	a, b := randSlice[float64](r, m*k), randSlice[float64](r, k*n)
	c, want := make([]float64, m*n), make([]float64, m*n)
	gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
	gemmRef(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
	if d := maxRelDiff(m, n, c, n, want, n); d > 1e-13 {
		t.Fatalf("max rel diff %g", d)
	}
	c[5*n+40] += 1e-9
	if d := maxRelDiff(m, n, c, n, want, n); d <= 1e-13 {
		t.Fatalf("a perturbed result was not detected (diff %g)", d)
	}
	// And the transposed read really differs from the plain one.
	gemm(true, false, m, n, k, 1, a, m, b, n, 0, c, n)
	if d := maxRelDiff(m, n, c, n, want, n); d <= 1e-13 {
		t.Fatal("transA gave the same result as no transpose")
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
				for it := 0; it < 50; it++ {
					c, want := make([]float32, m*n), make([]float32, m*n)
					gemm(false, true, m, n, k, 1, a, k, b, k, 0, c, n)
					gemmRef(false, true, m, n, k, 1, a, k, b, k, 0, want, n)
					if d := maxRelDiff(m, n, c, n, want, n); d > tol32(k) {
						errs <- fmt.Errorf("goroutine %d: max rel diff %g", g, d)
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
	if v := be.Variant("matmul"); v != goKernelName || (v != "go" && v != "go-avx2") {
		t.Errorf("Variant(matmul) without BLAS = %q", v)
	}
	restore()
	if ok, restore := useBLAS(true); ok {
		if v := be.Variant("matmul"); v != loadedBLAS.name {
			t.Errorf("Variant(matmul) with BLAS = %q, want %q", v, loadedBLAS.name)
		}
		restore()
	}
	t.Logf("matmul variant: %s (BLAS loaded: %v)", be.Variant("matmul"), loadedBLAS != nil)
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
