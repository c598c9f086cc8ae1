package emu

// The shim's MSL 4.0 tensor ops (shim/forge_tensor_ops.h: metal::tensor,
// cooperative tensors, mpp::tensor_ops::matmul2d) against Go loops: every
// operand layout (transpose_left / transpose_right), multiply and
// multiply_accumulate, cooperative and tensor destinations, one and four
// simdgroups, float, half and bfloat operands, and edge tiles (M, N, K not
// multiples of the tile); and the misuses the emulator must report: a run
// not every thread of the scope reaches, a threadgroup of another number of
// simdgroups than the scope's, and a kernel that ignores is_valid_element.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/forgeml/forge/forge/half"
	"github.com/forgeml/forge/metal/driver"
)

const tensorOpsSrc = `
#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;

// a is M × K, b is K × N, c is M × N (rows of ldc). lda / ldb: the stride
// of the operand's outer axis (its inner one is contiguous).
struct TP {
    int m, n, k;
    int lda, ldb, ldc;
    int init_nan; // multiply mode: start the destination tile from NaN
};

template <bool T, typename E>
static inline auto op_tensor(device E* p, int rows, int cols, int ld) {
    if (T) {
        return tensor(p, dextents<int32_t, 2>(rows, cols), array<int32_t, 2>({1, ld}));
    }
    return tensor(p, dextents<int32_t, 2>(cols, rows), array<int32_t, 2>({1, ld}));
}

// coop: a BM × BN block per threadgroup of SG simdgroups, into a float
// cooperative tensor.
template <typename T, int BM, int BN, int SG, bool TL, bool TR, bool ACC>
kernel void coop(device float* c [[buffer(0)]], device T* a [[buffer(1)]], device T* b [[buffer(2)]],
                 constant TP& p [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]]) {
    constexpr auto d = matmul2d_descriptor(BM, BN, matmul2d_descriptor(BM, BN).k, TL, TR, false,
        ACC ? matmul2d_descriptor::mode::multiply_accumulate : matmul2d_descriptor::mode::multiply);
    matmul2d<d, execution_simdgroups<SG>> op;
    const int row0 = tg.y * BM, col0 = tg.x * BN;
    auto ta = op_tensor<TL>(a, p.m, p.k, p.lda);
    auto tb = op_tensor<TR>(b, p.k, p.n, p.ldb);
    auto ma = TL ? ta.slice(row0, 0) : ta.slice(0, row0);
    auto mb = TR ? tb.slice(0, col0) : tb.slice(col0, 0);
    auto ct = op.template get_destination_cooperative_tensor<decltype(ma), decltype(mb), float>();
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        if (!ct.is_valid_element(i)) continue;
        auto ix = ct.get_multidimensional_index(i);
        int r = row0 + ix[1], q = col0 + ix[0];
        ct[i] = p.init_nan ? NAN : (r < p.m && q < p.n ? c[r * p.ldc + q] : 0.0f);
    }
    op.run(ma, mb, ct);
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        if (!ct.is_valid_element(i)) continue;
        auto ix = ct.get_multidimensional_index(i);
        int r = row0 + ix[1], q = col0 + ix[0];
        if (r < p.m && q < p.n) c[r * p.ldc + q] = ct[i];
    }
}

// direct: the same into a tensor destination of type D (no cooperative
// tensor): the op writes the block itself, inside c's extents.
template <typename T, typename D, bool ACC>
kernel void direct(device D* c [[buffer(0)]], device T* a [[buffer(1)]], device T* b [[buffer(2)]],
                   constant TP& p [[buffer(3)]], uint3 tg [[threadgroup_position_in_grid]]) {
    constexpr auto d = matmul2d_descriptor(64, 32, matmul2d_descriptor(64, 32).k, false, false, false,
        ACC ? matmul2d_descriptor::mode::multiply_accumulate : matmul2d_descriptor::mode::multiply);
    matmul2d<d, execution_simdgroups<4>> op;
    auto ta = op_tensor<false>(a, p.m, p.k, p.lda);
    auto tb = op_tensor<false>(b, p.k, p.n, p.ldb);
    auto tc = op_tensor<false>(c, p.m, p.n, p.ldc);
    auto ma = ta.slice(0, tg.y * 64);
    auto mb = tb.slice(tg.x * 32, 0);
    auto mc = tc.slice(tg.x * 32, tg.y * 64);
    op.run(ma, mb, mc);
}

// partial_run: only the first two of four simdgroups reach run.
kernel void partial_run(device float* c [[buffer(0)]], device float* a [[buffer(1)]], device float* b [[buffer(2)]],
                        constant TP& p [[buffer(3)]], uint sg [[simdgroup_index_in_threadgroup]]) {
    constexpr auto d = matmul2d_descriptor(64, 32);
    matmul2d<d, execution_simdgroups<4>> op;
    auto ta = op_tensor<false>(a, p.m, p.k, p.lda);
    auto tb = op_tensor<false>(b, p.k, p.n, p.ldb);
    auto ct = op.get_destination_cooperative_tensor<decltype(ta), decltype(tb), float>();
    if (sg < 2) {
        op.run(ta, tb, ct);
    }
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        if (ct.is_valid_element(i)) c[0] = ct[i];
    }
}

// ignore_valid: stores every slot of its cooperative tensor, valid or not.
kernel void ignore_valid(device float* c [[buffer(0)]], device float* a [[buffer(1)]], device float* b [[buffer(2)]],
                         constant TP& p [[buffer(3)]]) {
    constexpr auto d = matmul2d_descriptor(64, 32);
    matmul2d<d, execution_simdgroups<4>> op;
    auto ta = op_tensor<false>(a, p.m, p.k, p.lda);
    auto tb = op_tensor<false>(b, p.k, p.n, p.ldb);
    auto ct = op.get_destination_cooperative_tensor<decltype(ta), decltype(tb), float>();
    for (uint16_t i = 0; i < ct.get_capacity(); i++) ct[i] = 0.0f;
    op.run(ta, tb, ct);
    for (uint16_t i = 0; i < ct.get_capacity(); i++) {
        auto ix = ct.get_multidimensional_index(i);
        c[ix[1] * p.ldc + ix[0]] = ct[i];
    }
}

template [[host_name("coop_nn")]] [[kernel]] void coop<float, 64, 32, 4, false, false, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_nt")]] [[kernel]] void coop<float, 64, 32, 4, false, true, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_tn")]] [[kernel]] void coop<float, 64, 32, 4, true, false, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_tt")]] [[kernel]] void coop<float, 64, 32, 4, true, true, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_nn_mul")]] [[kernel]] void coop<float, 64, 32, 4, false, false, false>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_sg1")]] [[kernel]] void coop<float, 16, 32, 1, false, true, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("coop_f16")]] [[kernel]] void coop<half, 64, 32, 4, true, false, true>(device float*, device half*, device half*, constant TP&, uint3);
template [[host_name("coop_bf16")]] [[kernel]] void coop<bfloat, 64, 32, 4, false, true, true>(device float*, device bfloat*, device bfloat*, constant TP&, uint3);
template [[host_name("direct_acc")]] [[kernel]] void direct<float, float, true>(device float*, device float*, device float*, constant TP&, uint3);
template [[host_name("direct_f16")]] [[kernel]] void direct<half, half, false>(device half*, device half*, device half*, constant TP&, uint3);
`

var (
	tensorDrvOnce sync.Once
	tensorDrv     *Driver
	tensorDrvErr  error
)

// tensorOpsDriver opens (once) a driver of tensorOpsSrc alone.
func tensorOpsDriver(t *testing.T) *Driver {
	t.Helper()
	if _, _, err := findClang(); err != nil {
		t.Skip(err)
	}
	tensorDrvOnce.Do(func() {
		tensorDrv, tensorDrvErr = Open(map[string]string{"tensorops.metal": tensorOpsSrc}, Options{Threads: 2})
	})
	if tensorDrvErr != nil {
		t.Fatal(tensorDrvErr)
	}
	return tensorDrv
}

// tpBytes is a TP block.
func tpBytes(m, n, k, lda, ldb, ldc int, initNaN bool) []byte {
	nan := uint32(0)
	if initNaN {
		nan = 1
	}
	return u32bytes(uint32(m), uint32(n), uint32(k), uint32(lda), uint32(ldb), uint32(ldc), nan)
}

// mmRef is c + a·b (or a·b), accumulated in float64, with Σ|terms|.
func mmRef(a, b func(i, j int) float64, c []float32, ldc, m, n, k int, acc bool) (want, mag []float64) {
	want, mag = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			s, g := 0.0, 0.0
			if acc {
				s = float64(c[i*ldc+j])
				g = math.Abs(s)
			}
			for l := 0; l < k; l++ {
				p := a(i, l) * b(l, j)
				s += p
				g += math.Abs(p)
			}
			want[i*n+j], mag[i*n+j] = s, g
		}
	}
	return want, mag
}

// gammaK is γ(K+1) = n·u/(1 − n·u), u = 2⁻²⁴, n = K+1: the bound of any
// float32 summation order of K+1 terms, relative to Σ|terms|.
func gammaK(k int) float64 {
	nu := float64(k+1) * 0x1p-24
	return nu / (1 - nu)
}

var tensorShapes = []struct{ m, n, k int }{
	{64, 32, 16},  // one whole tile
	{70, 45, 33},  // edges on every side
	{1, 1, 1},     // a single element
	{5, 70, 100},  // one partial tile row, three tile columns
	{130, 9, 7},   // three tile rows, one partial column
	{128, 64, 64}, // aligned, several tiles
}

// opData is an m × k operand (k × n for b) stored row-major (ld ≥ cols)
// or column-major (ld ≥ rows), with the values vals(i, j).
func opData(rows, cols int, trans bool, pad int, vals func(i, j int) float32) (data []float32, ld int) {
	if trans {
		ld = rows + pad
		data = make([]float32, ld*cols)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				data[j*ld+i] = vals(i, j)
			}
		}
		return data, ld
	}
	ld = cols + pad
	data = make([]float32, ld*rows)
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			data[i*ld+j] = vals(i, j)
		}
	}
	return data, ld
}

func TestTensorOpsMatMul2D(t *testing.T) {
	d := tensorOpsDriver(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ints := func(int, int) float32 { return float32(rng.IntN(9) - 4) }
	normal := func(int, int) float32 { return float32(rng.NormFloat64()) }
	type kcase struct {
		name       string
		bm, bn, sg int
		ta, tb     bool
		acc        bool
	}
	cases := []kcase{
		{"coop_nn", 64, 32, 4, false, false, true},
		{"coop_nt", 64, 32, 4, false, true, true},
		{"coop_tn", 64, 32, 4, true, false, true},
		{"coop_tt", 64, 32, 4, true, true, true},
		{"coop_nn_mul", 64, 32, 4, false, false, false},
		{"coop_sg1", 16, 32, 1, false, true, true},
	}
	worst := 0.0
	for _, kc := range cases {
		p := pipe(t, d, kc.name)
		for _, s := range tensorShapes {
			for _, gen := range []struct {
				name  string
				vals  func(int, int) float32
				exact bool
			}{{"integers", ints, true}, {"normal", normal, false}} {
				ad, lda := opData(s.m, s.k, kc.ta, 3, gen.vals)
				bd, ldb := opData(s.k, s.n, kc.tb, 1, gen.vals)
				ldc := s.n + 2
				cd := make([]float32, s.m*ldc)
				for i := range cd {
					cd[i] = gen.vals(0, 0)
				}
				at := func(i, l int) float64 {
					if kc.ta {
						return float64(ad[l*lda+i])
					}
					return float64(ad[i*lda+l])
				}
				bt := func(l, j int) float64 {
					if kc.tb {
						return float64(bd[j*ldb+l])
					}
					return float64(bd[l*ldb+j])
				}
				want, mag := mmRef(at, bt, cd, ldc, s.m, s.n, s.k, kc.acc)
				withSchedules(d, func(sched string) {
					ba, bb, bc := f32buf(t, d, ad), f32buf(t, d, bd), f32buf(t, d, cd)
					groups := [3]int{(s.n + kc.bn - 1) / kc.bn, (s.m + kc.bm - 1) / kc.bm, 1}
					if err := run(d, p, groups, [3]int{32 * kc.sg, 1, 1}, bufArg(bc), bufArg(ba), bufArg(bb),
						bytesArg(tpBytes(s.m, s.n, s.k, lda, ldb, ldc, !kc.acc))); err != nil {
						t.Fatalf("%s %v: %v", kc.name, s, err)
					}
					got := f32s(bc)
					for i := 0; i < s.m; i++ {
						for j := 0; j < ldc; j++ {
							g := float64(got[i*ldc+j])
							if j >= s.n { // the padding of c's rows is not written
								if got[i*ldc+j] != cd[i*ldc+j] {
									t.Fatalf("%s %v %s: c[%d][%d] (padding) = %v, was %v", kc.name, s, sched, i, j, g, cd[i*ldc+j])
								}
								continue
							}
							w, bound := want[i*s.n+j], gammaK(s.k)*mag[i*s.n+j]
							if gen.exact {
								bound = 0
							}
							if e := math.Abs(g - w); !(e <= bound) {
								t.Fatalf("%s %v %s %s: c[%d][%d] = %v, want %v (bound %.3g)", kc.name, s, gen.name, sched, i, j, g, w, bound)
							} else if mag[i*s.n+j] > 0 && !gen.exact {
								worst = max(worst, e/(gammaK(s.k)*mag[i*s.n+j]))
							}
						}
					}
				})
			}
		}
	}
	t.Logf("float32 tiles: worst |error| / γ(K+1)·Σ|terms| = %.3g", worst)
}

// TestTensorOpsMatMul2D16 checks half and bfloat operands into float32:
// every product is exact, so the result is within γ(K+1)·Σ|terms| of the
// float64 sum (and exact on small integers).
func TestTensorOpsMatMul2D16(t *testing.T) {
	d := tensorOpsDriver(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name   string
		bf     bool
		ta, tb bool
	}{{"coop_f16", false, true, false}, {"coop_bf16", true, false, true}} {
		p := pipe(t, d, tc.name)
		enc := func(x float32) (uint16, float32) {
			if tc.bf {
				h := half.BFloat16Bits(x)
				return h, half.BFloat16FromBits(h)
			}
			h := half.Float16Bits(x)
			return h, half.Float16FromBits(h)
		}
		for _, s := range tensorShapes {
			mk := func(rows, cols int, trans bool) ([]uint16, int, func(i, j int) float64) {
				ld := cols + 1
				if trans {
					ld = rows + 1
				}
				n := ld * max(rows, cols)
				bits, vals := make([]uint16, n), make([]float32, n)
				idx := func(i, j int) int {
					if trans {
						return j*ld + i
					}
					return i*ld + j
				}
				for i := 0; i < rows; i++ {
					for j := 0; j < cols; j++ {
						bits[idx(i, j)], vals[idx(i, j)] = enc(float32(rng.NormFloat64()))
					}
				}
				return bits, ld, func(i, j int) float64 { return float64(vals[idx(i, j)]) }
			}
			ab, lda, at := mk(s.m, s.k, tc.ta)
			bb, ldb, bt := mk(s.k, s.n, tc.tb)
			cd := make([]float32, s.m*s.n)
			for i := range cd {
				cd[i] = float32(rng.NormFloat64())
			}
			want, mag := mmRef(at, bt, cd, s.n, s.m, s.n, s.k, true)
			bufA, bufB := u16buf(t, d, ab), u16buf(t, d, bb)
			bc := f32buf(t, d, cd)
			groups := [3]int{(s.n + 31) / 32, (s.m + 63) / 64, 1}
			if err := run(d, p, groups, [3]int{128, 1, 1}, bufArg(bc), bufArg(bufA), bufArg(bufB),
				bytesArg(tpBytes(s.m, s.n, s.k, lda, ldb, s.n, false))); err != nil {
				t.Fatalf("%s %v: %v", tc.name, s, err)
			}
			for i, g := range f32s(bc) {
				if e := math.Abs(float64(g) - want[i]); !(e <= gammaK(s.k)*mag[i]) {
					t.Fatalf("%s %v: c[%d] = %v, want %v ± %.3g", tc.name, s, i, g, want[i], gammaK(s.k)*mag[i])
				}
			}
		}
	}
}

// TestTensorOpsDirect checks a tensor destination: multiply_accumulate in
// float32, and multiply into a half destination (rounded once), both only
// inside the destination's extents.
func TestTensorOpsDirect(t *testing.T) {
	d := tensorOpsDriver(t)
	rng := rand.New(rand.NewPCG(7, 8))
	ints := func(int, int) float32 { return float32(rng.IntN(9) - 4) }
	for _, s := range tensorShapes {
		ad, lda := opData(s.m, s.k, false, 0, ints)
		bd, ldb := opData(s.k, s.n, false, 0, ints)
		cd := make([]float32, s.m*s.n+5) // 5 guard elements after c
		for i := range cd {
			cd[i] = ints(0, 0)
		}
		at := func(i, l int) float64 { return float64(ad[i*lda+l]) }
		bt := func(l, j int) float64 { return float64(bd[l*ldb+j]) }
		want, _ := mmRef(at, bt, cd, s.n, s.m, s.n, s.k, true)
		bc := f32buf(t, d, cd)
		groups := [3]int{(s.n + 31) / 32, (s.m + 63) / 64, 1}
		withSchedules(d, func(sched string) {
			copy(bc.Bytes(), f32bytes(cd...))
			if err := run(d, pipe(t, d, "direct_acc"), groups, [3]int{128, 1, 1}, bufArg(bc), bufArg(f32buf(t, d, ad)),
				bufArg(f32buf(t, d, bd)), bytesArg(tpBytes(s.m, s.n, s.k, lda, ldb, s.n, false))); err != nil {
				t.Fatal(err)
			}
			got := f32s(bc)
			for i := range got {
				w := float64(cd[i])
				if i < s.m*s.n {
					w = want[i]
				}
				if float64(got[i]) != w {
					t.Fatalf("direct_acc %v %s: c[%d] = %v, want %v", s, sched, i, got[i], w)
				}
			}
		})
		// half operands and destination, mode multiply: c = round(a·b).
		ah, bh := make([]uint16, len(ad)), make([]uint16, len(bd))
		for i, x := range ad {
			ah[i] = half.Float16Bits(x)
		}
		for i, x := range bd {
			bh[i] = half.Float16Bits(x)
		}
		ch := make([]uint16, s.m*s.n+5)
		for i := range ch {
			ch[i] = 0x7e00 // NaN: a multiply must not read it
		}
		want0, _ := mmRef(at, bt, nil, s.n, s.m, s.n, s.k, false)
		bch := u16buf(t, d, ch)
		if err := run(d, pipe(t, d, "direct_f16"), groups, [3]int{128, 1, 1}, bufArg(bch), bufArg(u16buf(t, d, ah)),
			bufArg(u16buf(t, d, bh)), bytesArg(tpBytes(s.m, s.n, s.k, lda, ldb, s.n, false))); err != nil {
			t.Fatal(err)
		}
		for i := range ch {
			g := binary.LittleEndian.Uint16(bch.Bytes()[2*i:])
			w := uint16(0x7e00)
			if i < s.m*s.n {
				w = half.Float16Bits(float32(want0[i]))
			}
			if g != w {
				t.Fatalf("direct_f16 %v: c[%d] = %#04x, want %#04x", s, i, g, w)
			}
		}
	}
}

// TestTensorOpsMisuse: the emulator reports a run that not every thread
// of the scope reaches and a scope of another number of simdgroups than
// the threadgroup's, and its cooperative-tensor layout exposes a kernel
// that ignores is_valid_element.
func TestTensorOpsMisuse(t *testing.T) {
	d := tensorOpsDriver(t)
	ones := make([]float32, 64*64)
	for i := range ones {
		ones[i] = 1
	}
	params := bytesArg(tpBytes(64, 32, 16, 16, 32, 32, false))
	args := func() []driver.Arg {
		return []driver.Arg{bufArg(f32buf(t, d, make([]float32, 64*32))), bufArg(f32buf(t, d, ones)), bufArg(f32buf(t, d, ones)), params}
	}
	err := run(d, pipe(t, d, "partial_run"), [3]int{1, 1, 1}, [3]int{128, 1, 1}, args()...)
	if err == nil || !strings.Contains(err.Error(), "not every thread of the threadgroup") {
		t.Errorf("run reached by two of four simdgroups: err = %v", err)
	}
	err = run(d, pipe(t, d, "coop_nn"), [3]int{1, 1, 1}, [3]int{64, 1, 1}, args()...)
	if err == nil || !strings.Contains(err.Error(), "execution_simdgroups") {
		t.Errorf("execution_simdgroups<4> in a threadgroup of 2 simdgroups: err = %v", err)
	}
	err = run(d, pipe(t, d, "coop_nn"), [3]int{1, 1, 1}, [3]int{112, 1, 1}, args()...)
	if err == nil || !strings.Contains(err.Error(), "not uniform") {
		t.Errorf("a threadgroup with a partial simdgroup: err = %v", err)
	}
	// Every element of the 64 × 32 product of ones over K = 16 is 16; the
	// invalid slots (coordinates (0, 0), which the run leaves at the 0 the
	// kernel put there) overwrite element (0, 0).
	a := args()
	if err := run(d, pipe(t, d, "ignore_valid"), [3]int{1, 1, 1}, [3]int{128, 1, 1}, a...); err != nil {
		t.Fatal(err)
	}
	got := f32s(a[0].Buf)
	if got[0] == 16 {
		t.Errorf("ignore_valid: element (0, 0) = 16: the invalid slots went unnoticed")
	}
	for i, g := range got[1:] {
		if g != 16 {
			t.Fatalf("ignore_valid: element %d = %v, want 16", i+1, g)
		}
	}
}

func u16buf(t testing.TB, d *Driver, xs []uint16) driver.Buffer {
	t.Helper()
	b, err := d.NewBuffer(max(2*len(xs), 4))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		binary.LittleEndian.PutUint16(b.Bytes()[2*i:], x)
	}
	return b
}
