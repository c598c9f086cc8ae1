package emu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestMMA8x8 checks simdgroup_load (elements_per_row, origin, transpose),
// simdgroup_multiply_accumulate and simdgroup_store (plain and transposed)
// against Go loops.
func TestMMA8x8(t *testing.T) {
	d := testDriver(t)
	p := pipe(t, d, "mma_8x8")
	rng := rand.New(rand.NewPCG(1, 2))
	const lda, ldb, ldc = 16, 11, 9
	a := make([]float32, 16*lda)
	b := make([]float32, 8*ldb)
	c := make([]float32, 8*ldc)
	for _, s := range [][]float32{a, b, c} {
		for i := range s {
			s[i] = float32(rng.IntN(17) - 8)
		}
	}
	ba, bb, bc := f32buf(t, d, a), f32buf(t, d, b), f32buf(t, d, c)
	for _, tc := range []struct{ ox, oy, at, bt uint32 }{{0, 0, 0, 0}, {3, 5, 0, 0}, {8, 2, 1, 0}, {0, 0, 0, 1}, {5, 7, 1, 1}} {
		// A's 8×8 block at (column ox, row oy), transposed if at.
		am := func(r, k int) float32 {
			if tc.at != 0 {
				r, k = k, r
			}
			return a[(int(tc.oy)+r)*lda+int(tc.ox)+k]
		}
		bm := func(k, col int) float32 {
			if tc.bt != 0 {
				k, col = col, k
			}
			return b[k*ldb+col]
		}
		withSchedules(d, func(sched string) {
			dd := f32buf(t, d, make([]float32, 64))
			dt := f32buf(t, d, make([]float32, 64))
			params := u32bytes(lda, ldb, ldc, 0, tc.ox, tc.oy, tc.at, tc.bt)[:]
			// MMAParams: 3 uints, pad to 8-byte alignment of uint2, uint2, 2 uints.
			params = append(u32bytes(lda, ldb, ldc, 0), u32bytes(tc.ox, tc.oy, tc.at, tc.bt)...)
			if err := run(d, p, [3]int{1, 1, 1}, [3]int{32, 1, 1}, bufArg(ba), bufArg(bb), bufArg(bc), bufArg(dd), bufArg(dt), bytesArg(params)); err != nil {
				t.Fatal(err)
			}
			got, gotT := f32s(dd), f32s(dt)
			for r := 0; r < 8; r++ {
				for col := 0; col < 8; col++ {
					want := c[r*ldc+col]
					for k := 0; k < 8; k++ {
						want += am(r, k) * bm(k, col)
					}
					if got[r*8+col] != want || gotT[col*8+r] != want {
						t.Fatalf("%+v %s: d[%d][%d] = %v (transposed store %v), want %v", tc, sched, r, col, got[r*8+col], gotT[col*8+r], want)
					}
				}
			}
		})
	}
}

// TestMMAHalf: half inputs (through threadgroup memory written by the
// lanes, then simdgroup_barrier) into a float accumulator.
func TestMMAHalf(t *testing.T) {
	d := testDriver(t)
	a := make([]byte, 128)
	b := make([]byte, 128)
	av, bv := make([]float32, 64), make([]float32, 64)
	for i := 0; i < 64; i++ {
		av[i] = float32(i%7) - 3
		bv[i] = float32(i%5) * 0.5
		binary.LittleEndian.PutUint16(a[2*i:], f16bits(av[i]))
		binary.LittleEndian.PutUint16(b[2*i:], f16bits(bv[i]))
	}
	ba, _ := d.NewBuffer(128)
	bb, _ := d.NewBuffer(128)
	copy(ba.Bytes(), a)
	copy(bb.Bytes(), b)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 64))
		if err := run(d, pipe(t, d, "mma_half"), [3]int{1, 1, 1}, [3]int{32, 1, 1}, bufArg(ba), bufArg(bb), bufArg(out)); err != nil {
			t.Fatal(err)
		}
		got := f32s(out)
		for r := 0; r < 8; r++ {
			for col := 0; col < 8; col++ {
				want := float32(1)
				for k := 0; k < 8; k++ {
					want += av[r*8+k] * bv[k*8+col]
				}
				if got[r*8+col] != want {
					t.Fatalf("%s: d[%d][%d] = %v, want %v", sched, r, col, got[r*8+col], want)
				}
			}
		}
	})
}

// f16bits converts small exactly-representable values to IEEE half.
func f16bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int((b>>23)&0xff) - 127 + 15
	mant := uint16((b >> 13) & 0x3ff)
	if f == 0 {
		return sign
	}
	return sign | uint16(exp)<<10 | mant
}

func gemmRef(A, B []float32, M, N, K int, bt bool) []float32 {
	C := make([]float32, M*N)
	for i := 0; i < M; i++ {
		for j := 0; j < N; j++ {
			var s float64
			for k := 0; k < K; k++ {
				bv := B[k*N+j]
				if bt {
					bv = B[j*K+k]
				}
				s += float64(A[i*K+k]) * float64(bv)
			}
			C[i*N+j] = float32(s)
		}
	}
	return C
}

// TestGEMM128 multiplies 128³ through simdgroup_float8x8 tiles (B plain
// and transposed) and compares with a Go reference; it reports the time.
func TestGEMM128(t *testing.T) {
	d := testDriver(t)
	const M, N, K = 128, 128, 128
	rng := rand.New(rand.NewPCG(3, 4))
	A := make([]float32, M*K)
	B := make([]float32, K*N)
	for i := range A {
		A[i] = rng.Float32()*2 - 1
	}
	for i := range B {
		B[i] = rng.Float32()*2 - 1
	}
	ba, bb := f32buf(t, d, A), f32buf(t, d, B)
	p := pipe(t, d, "gemm_sg")
	for _, bt := range []bool{false, true} {
		want := gemmRef(A, B, M, N, K, bt)
		flag := uint32(0)
		if bt {
			flag = 1
		}
		bc := f32buf(t, d, make([]float32, M*N))
		var best time.Duration
		for rep := 0; rep < 7; rep++ {
			cb := d.NewCommandBuffer()
			cb.Encode(dispatch(p, [3]int{N / 32, M / 32, 1}, [3]int{128, 1, 1}, bufArg(ba), bufArg(bb), bufArg(bc), bytesArg(u32bytes(M, N, K, flag))))
			cb.Commit()
			if err := cb.Wait(); err != nil {
				t.Fatal(err)
			}
			if g := cb.GPUTime(); rep == 0 || g < best {
				best = g
			}
			if rep == 0 {
				st := StatsOf(cb)
				t.Logf("b_trans=%v: %d rounds, %d fiber switches", bt, st.Rounds, st.Switches)
			}
		}
		got := f32s(bc)
		worst := 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i]-want[i])))
		}
		if worst > 1e-4 {
			t.Fatalf("b_trans=%v: max |diff| = %g", bt, worst)
		}
		t.Logf("GEMM 128³ (b_trans=%v): %v (best of 7, %d threads), max |diff| %.2g", bt, best, d.threads, worst)
	}
}

// TestSoftmax: threadgroup memory + simd_max/simd_sum, rows of 300 with
// 96-thread (3-simdgroup) and 80-thread (partial simdgroup) threadgroups.
func TestSoftmax(t *testing.T) {
	d := testDriver(t)
	const rows, n = 7, 300
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, rows*n)
	for i := range x {
		x[i] = rng.Float32()*20 - 10
	}
	want := make([]float64, rows*n)
	for r := 0; r < rows; r++ {
		m := math.Inf(-1)
		for i := 0; i < n; i++ {
			m = math.Max(m, float64(x[r*n+i]))
		}
		s := 0.0
		for i := 0; i < n; i++ {
			s += math.Exp(float64(x[r*n+i]) - m)
		}
		for i := 0; i < n; i++ {
			want[r*n+i] = math.Exp(float64(x[r*n+i])-m) / s
		}
	}
	bx := f32buf(t, d, x)
	p := pipe(t, d, "softmax_rows")
	for _, tg := range []int{96, 80, 1024} {
		withSchedules(d, func(sched string) {
			y := f32buf(t, d, make([]float32, rows*n))
			if err := run(d, p, [3]int{rows, 1, 1}, [3]int{tg, 1, 1}, bufArg(bx), bufArg(y), bytesArg(u32bytes(n))); err != nil {
				t.Fatal(err)
			}
			for i, v := range f32s(y) {
				if math.Abs(float64(v)-want[i]) > 1e-6+1e-5*want[i] {
					t.Fatalf("tg %d %s: y[%d] = %v, want %v", tg, sched, i, v, want[i])
				}
			}
		})
	}
}

// TestMMAInPlace: load, multiply and store back to the same threadgroup
// memory, then per-lane updates: lockstep semantics under every schedule.
func TestMMAInPlace(t *testing.T) {
	d := testDriver(t)
	in := make([]float32, 64)
	for i := range in {
		in[i] = float32(i%13) - 6
	}
	bin := f32buf(t, d, in)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 64))
		if err := run(d, pipe(t, d, "mma_inplace"), [3]int{1, 1, 1}, [3]int{32, 1, 1}, bufArg(bin), bufArg(out)); err != nil {
			t.Fatal(err)
		}
		for i, v := range f32s(out) {
			if want := float32(i/8+1)*in[i] + 1; v != want {
				t.Fatalf("%s: out[%d] = %v, want %v", sched, i, v, want)
			}
		}
	})
}

// TestThreadElements: fragments written and read through
// thread_elements() (Apple's lane → element mapping) are merged at the
// next matrix operation.
func TestThreadElements(t *testing.T) {
	d := testDriver(t)
	a, b := make([]float32, 64), make([]float32, 64)
	for i := range a {
		a[i] = float32(i%7) - 3
		b[i] = float32(i%5) - 2
	}
	ba, bb := f32buf(t, d, a), f32buf(t, d, b)
	withSchedules(d, func(sched string) {
		o0, o1 := f32buf(t, d, make([]float32, 64)), f32buf(t, d, make([]float32, 64))
		if err := run(d, pipe(t, d, "frag_mma"), [3]int{1, 1, 1}, [3]int{32, 1, 1}, bufArg(ba), bufArg(bb), bufArg(o0), bufArg(o1)); err != nil {
			t.Fatal(err)
		}
		g0, g1 := f32s(o0), f32s(o1)
		for r := 0; r < 8; r++ {
			for c := 0; c < 8; c++ {
				var s float32
				for k := 0; k < 8; k++ {
					s += a[r*8+k] * b[k*8+c]
				}
				s *= float32(r + 1)
				if g0[r*8+c] != s || g1[r*8+c] != s {
					t.Fatalf("%s: [%d][%d] = %v (thread_elements), %v (store), want %v", sched, r, c, g0[r*8+c], g1[r*8+c], s)
				}
			}
		}
	})
}
