package cpu

// The exponential behind every exp-based float32 kernel (elementwise exp,
// sigmoid, SiLU, tanh, GELU-tanh and their gradients, softmax, cross-entropy,
// attention), in two forms:
//
//   - expf, a scalar float64 exp with a relative error below 5e-16, about
//     1.5 times as fast as math.Exp (and, unlike math.Exp on amd64, finite
//     up to 709.78);
//   - slice kernels that read float32, compute e^x in float64 and round each
//     result to float32 once: expShiftSum32 (exp of src − shift, optionally
//     scaled and stored, summed in float64), expShift64 (the float64 values,
//     for formulas finished in Go) and sigmoid32 (sigmoid, SiLU, tanh,
//     GELU-tanh and the SiLU and GELU-tanh gradients, fused).
//
// On amd64 the slice kernels are assembly: AVX-512 (exp_avx512_amd64.s,
// eight float64 lanes, an 8-entry table and VSCALEFPD) where the CPU has
// AVX512F and AVX512VL, else AVX2 with FMA (exp_amd64.s, four lanes, no
// table). Elsewhere, on CPUs without AVX2 and FMA, and with the build tag
// purego, they are the Go loops of this file, built on expf. Each kernel
// processes any length, tails included, with the same per-element
// arithmetic, so results do not depend on where a slice is cut.
//
// Working in float64 costs half the vector width of a float32 exp but keeps
// every result correctly rounded in practice: the float64 value is good to
// about 5e-16 relative, far below float32's half ulp (3e-8 to 6e-8), so the
// rounding to float32 can go wrong only for an exact value within 5e-16 of
// a rounding boundary. exp_test.go checks all 2^32 float32 inputs (with
// FORGE_EXP_EXHAUSTIVE=1): every implementation returns the correctly
// rounded float32 for each, denormal results, overflow to +Inf, underflow
// to 0 and NaN included. The shift (a row max or log-sum-exp) is subtracted
// in float64, where the difference of float32 values is exact, and the
// formulas of the fused ops are evaluated in float64 too, as the Go loops
// they replace did, so those results are the float64 formula rounded once.
//
// All three compute e^x = 2^k·e^r with r = x − k·ln2/N (ln2/N in two
// parts) and e^r from its Taylor polynomial: N = 64 and degree 5 in expf
// (2^(j/64) from a table, cheap in scalar code), N = 1 and degree 12 in the
// AVX2 kernel (no table; Horner's scheme in r² over linear pairs, FMAs),
// N = 8 and degree 8 in the AVX-512 kernel. Each clamps the argument to
// [−746, 710] and applies the power of two as factors that stay normal
// until the last product, so it overflows to +Inf, underflows gradually to
// 0 (float64 denormals within an ulp) and propagates NaN as math.Exp does.

import (
	"math"
	"unsafe"
)

// Constants of expf: e^x = 2^(k/64)·e^r with k = round(64x/ln2) and
// r = x − k·ln2/64, |r| ≤ ln2/128.
const (
	expfRound = 0x1.8p52 // adding it rounds a float64 of magnitude below 2^51 to an integer
	// ln2/64 in two parts: expfLn2Hi has its low 21 bits zero, so k·expfLn2Hi
	// is exact for |k| < 2^21 and x − k·expfLn2Hi is exact (Sterbenz).
	expfLn2Hi = 6.93147180369123816490e-01 / 64
	expfLn2Lo = 1.90821492927058770002e-10 / 64
	// Arguments are clamped to [expfMin, expfMax]: e^expfMin rounds to 0 and
	// e^expfMax to +Inf, and 2^k splits into two normal factors.
	expfMin = -746
	expfMax = 710
)

// expfTable[j] holds the bits of 2^(j/64).
var expfTable = func() (t [64]uint64) {
	for j := range t {
		t[j] = math.Float64bits(math.Exp2(float64(j) / 64))
	}
	return t
}()

// expf returns e^x with a relative error below 5e-16 (the test measures it
// against an exact reference), and denormal results below e^−708 within an
// ulp. It overflows to +Inf above about 709.78, gives 0 below about −745.13
// and propagates NaN, like math.Exp.
//
// e^x = 2^(k/64)·e^r with e^r from its Taylor polynomial to r⁵ (truncation
// below r⁶/720 < 4e-17) and 2^(k/64) = 2^(j/64)·2^(k>>6), j = k mod 64. The
// power of two is applied as two factors 2^e1·2^e2, e1 + e2 = k>>6, each
// normal, so the second product rounds the result once into the denormal
// range or to +Inf.
func expf(x float64) float64 {
	if x < expfMin { // NaN fails both tests and propagates through r
		x = expfMin
	}
	if x > expfMax {
		x = expfMax
	}
	kf := (x*(64/math.Ln2) + expfRound) - expfRound
	r := (x - kf*expfLn2Hi) - kf*expfLn2Lo
	k := int64(kf)
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120)))))
	e := k >> 6
	e1 := e >> 1
	s1 := math.Float64frombits(expfTable[k&63] + uint64(e1)<<52) // 2^(j/64)·2^e1
	s2 := math.Float64frombits(uint64(e-e1+1023) << 52)          // 2^e2
	return p * s1 * s2
}

// asF32 reinterprets s as []float32, for the float32 instantiation of a
// generic kernel (the caller has checked that T is float32).
func asF32[T Float](s []T) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// Ops of sigmoid32.
const (
	sigSigmoid  = iota // 1/(1 + e^−x)
	sigSiLU            // x/(1 + e^−x)
	sigGELUTanh        // x/(1 + e^−2u), u = √(2/π)·(x + 0.044715x³)
	sigTanh            // sign(x)·(1 − 2/(1 + e^2|x|)), series below 1/32
	sigSiLUGrad        // g·σ·(1 + x(1 − σ)), σ = 1/(1 + e^−x)
	sigGELUGrad        // g·(σ + 2x·σ(1 − σ)·√(2/π)·(1 + 3·0.044715x²)), σ = 1/(1 + e^−2u)
)

// Portable slice kernels: the definitions the assembly follows, and the
// implementation where it does not run.

// expGoSet is the portable implementation as an expKernelSet.
var expGoSet = expKernelSet{name: "go", shiftSum: expShiftSumGo, shift64: expShift64Go, sigmoid: sigmoid32Go}

// expShiftSumGo is the portable expShiftSum32.
func expShiftSumGo(dst, src []float32, shift, scale float64) (sum float64) {
	if dst == nil {
		for _, v := range src {
			sum += expf(float64(v) - shift)
		}
		return sum
	}
	dst = dst[:len(src)]
	for i, v := range src {
		e := expf(float64(v) - shift)
		sum += e
		dst[i] = float32(scale * e)
	}
	return sum
}

// expShift64Go is the portable expShift64.
func expShift64Go(dst []float64, src []float32, shift float64) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = expf(float64(v) - shift)
	}
}

// sigmoid32Go is the portable sigmoid32. It stages the arguments of exp in
// a float64 block first: called straight from a loop over float32, expf
// receives its argument from a CVTSS2SD that merges into the register
// holding the previous result, which chains every call to the one before
// (three times slower on amd64).
func sigmoid32Go(op int, dst, x, g []float32) {
	if op < sigSigmoid || op > sigGELUGrad {
		panic("cpu: sigmoid32: bad op")
	}
	n := len(dst)
	x = x[:n]
	if op >= sigSiLUGrad {
		g = g[:n]
	}
	var buf [256]float64
	for lo := 0; lo < n; lo += len(buf) {
		t := buf[:min(len(buf), n-lo)]
		xs, ds := x[lo:lo+len(t)], dst[lo:lo+len(t)]
		switch op {
		case sigSigmoid, sigSiLU, sigSiLUGrad:
			for i, v := range xs {
				t[i] = -float64(v)
			}
		case sigGELUTanh, sigGELUGrad: // −2u
			for i, v := range xs {
				w := float64(v)
				t[i] = -2 * geluK * (w + geluC*w*w*w)
			}
		case sigTanh:
			for i, v := range xs {
				t[i] = 2 * math.Abs(float64(v))
			}
		}
		for i, v := range t {
			t[i] = expf(v)
		}
		switch op {
		case sigSigmoid:
			for i, e := range t {
				ds[i] = float32(1 / (1 + e))
			}
		case sigSiLU, sigGELUTanh: // x·sigmoid(a)
			for i, e := range t {
				ds[i] = float32(float64(xs[i]) / (1 + e))
			}
		case sigTanh:
			for i, e := range t {
				ds[i] = float32(tanhFromExp(float64(xs[i]), e))
			}
		case sigSiLUGrad:
			gs := g[lo : lo+len(t)]
			for i, e := range t {
				w := float64(xs[i])
				sg := 1 / (1 + e)
				ds[i] = float32(float64(gs[i]) * sg * (1 + w*(1-sg)))
			}
		case sigGELUGrad:
			gs := g[lo : lo+len(t)]
			for i, e := range t {
				w := float64(xs[i])
				sg := 1 / (1 + e)
				ds[i] = float32(float64(gs[i]) * (sg + 2*w*sg*(1-sg)*geluK*(1+3*geluC*w*w)))
			}
		}
	}
}

// tanhFromExp returns tanh v for float32 use given e = e^(2|v|):
// tanh|v| = 1 − 2/(1 + e), and near 0, where that cancels, the Taylor
// series to v⁷ (error below 1e-13 relative for |v| < 1/32).
func tanhFromExp(v, e float64) float64 {
	if math.Abs(v) < 1.0/32 {
		v2 := v * v
		return v * (1 - v2*(1.0/3-v2*(2.0/15-v2*(17.0/315))))
	}
	return math.Copysign(1-2/(1+e), v)
}
