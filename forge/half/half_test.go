package half

import (
	"bufio"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The references below are written from the formats' definitions in
// float64 and math/big arithmetic, independently of the bit manipulation
// in half.go.

// f16Value is the value of binary16 bits h by the definition:
// (−1)^s·2^(e−15)·(1+f/2¹⁰) for normal numbers, (−1)^s·2^−14·(f/2¹⁰) for
// subnormal ones (e = 0), ±Inf or NaN for e = 31.
func f16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 31
	f := float64(h & 0x3ff)
	switch e {
	case 31:
		if f != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(f/1024, -14)
	}
	return s * math.Ldexp(1+f/1024, e-15)
}

// bf16Value is the value of bfloat16 bits h: 1 sign, 8 exponent (bias 127)
// and 7 fraction bits.
func bf16Value(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>7) & 255
	f := float64(h & 0x7f)
	switch e {
	case 255:
		if f != 0 {
			return math.NaN()
		}
		return math.Inf(int(s))
	case 0:
		return s * math.Ldexp(f/128, -126)
	}
	return s * math.Ldexp(1+f/128, e-127)
}

// refRound rounds the finite x to a float format with prec significand
// bits, smallest normal 2^emin and largest finite value maxFinite: ties to
// even, with the subnormal quantum 2^(emin−prec+1) below 2^emin, and ±Inf
// past maxFinite. Normal results use big.Float's rounding; subnormal ones
// scale to an integer count of quanta (exact in float64 for the inputs
// used) and round that with math.RoundToEven.
func refRound(x float64, prec uint, emin int, maxFinite float64) float64 {
	if math.Abs(x) < math.Ldexp(1, emin) {
		q := emin - int(prec) + 1
		r := math.RoundToEven(math.Ldexp(x, -q))
		return math.Copysign(math.Ldexp(r, q), x)
	}
	b := new(big.Float).SetPrec(prec).SetMode(big.ToNearestEven)
	b.SetFloat64(x)
	r, _ := b.Float64()
	if math.Abs(r) > maxFinite {
		return math.Copysign(math.Inf(1), x)
	}
	return r
}

func refF16(x float64) float64  { return refRound(x, 11, -14, 65504) }
func refBF16(x float64) float64 { return refRound(x, 8, -126, bf16Value(0x7f7f)) }

// sameValue reports whether a and b are both NaN or equal with the same
// sign (so +0 ≠ −0).
func sameValue(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b && math.Signbit(a) == math.Signbit(b)
}

// TestWideningExhaustive checks every one of the 65536 bit patterns of
// each format against the definition, NaN payloads included.
func TestWideningExhaustive(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		if got, want := float64(Float16FromBits(h)), f16Value(h); !sameValue(got, want) {
			t.Fatalf("Float16FromBits(%#04x) = %v, want %v", h, got, want)
		}
		if got, want := float64(BFloat16FromBits(h)), bf16Value(h); !sameValue(got, want) {
			t.Fatalf("BFloat16FromBits(%#04x) = %v, want %v", h, got, want)
		}
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			// NaN: sign and payload move into the float32 fraction's top.
			b := math.Float32bits(Float16FromBits(h))
			if b>>31 != uint32(h>>15) || b&0x7fffff != uint32(h&0x3ff)<<13 {
				t.Fatalf("Float16FromBits(%#04x) = %#08x: payload or sign lost", h, b)
			}
		}
		if b := math.Float32bits(BFloat16FromBits(h)); b != uint32(h)<<16 {
			t.Fatalf("BFloat16FromBits(%#04x) = %#08x, want the bits shifted up", h, b)
		}
	}
}

// TestRoundTrip narrows every widened value back: each non-NaN pattern
// must come back unchanged, each NaN as a quiet NaN of the same sign.
func TestRoundTrip(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		checkBack := func(name string, got, want, expMask, quiet uint16) {
			t.Helper()
			isNaN := want&expMask == expMask && want&^(0x8000|expMask) != 0
			if isNaN {
				if got&expMask != expMask || got&quiet == 0 || got&0x8000 != want&0x8000 {
					t.Fatalf("%s(NaN %#04x) = %#04x, want a quiet NaN of the same sign", name, want, got)
				}
				if want&quiet != 0 && got != want {
					t.Fatalf("%s(quiet NaN %#04x) = %#04x, want it unchanged", name, want, got)
				}
				return
			}
			if got != want {
				t.Fatalf("%s(value of %#04x) = %#04x", name, want, got)
			}
		}
		checkBack("Float16Bits", Float16Bits(Float16FromBits(h)), h, 0x7c00, 0x200)
		checkBack("Float16BitsFrom64", Float16BitsFrom64(float64(Float16FromBits(h))), h, 0x7c00, 0x200)
		checkBack("BFloat16Bits", BFloat16Bits(BFloat16FromBits(h)), h, 0x7f80, 0x40)
		checkBack("BFloat16BitsFrom64", BFloat16BitsFrom64(float64(BFloat16FromBits(h))), h, 0x7f80, 0x40)
	}
}

// nanOK reports whether the 16-bit result h of narrowing a NaN is a quiet
// NaN of the same sign.
func nanOK(h uint16, neg bool, expMask, quiet uint16) bool {
	return h&expMask == expMask && h&quiet != 0 && (h&0x8000 != 0) == neg
}

// TestSignalingNaN checks that NaNs whose payload sits only in the low
// bits (which a plain truncation would turn into Inf) stay NaN, quiet.
func TestSignalingNaN(t *testing.T) {
	for _, b := range []uint32{0x7f800001, 0xff800001, 0x7f800fff, 0x7fc00000, 0xffffffff, 0x7f801000, 0x7f810000} {
		x := math.Float32frombits(b)
		if h := Float16Bits(x); !nanOK(h, b>>31 != 0, 0x7c00, 0x200) {
			t.Errorf("Float16Bits(%#08x) = %#04x, want a quiet NaN", b, h)
		}
		if h := BFloat16Bits(x); !nanOK(h, b>>31 != 0, 0x7f80, 0x40) {
			t.Errorf("BFloat16Bits(%#08x) = %#04x, want a quiet NaN", b, h)
		}
	}
	for _, b := range []uint64{0x7ff0000000000001, 0xfff0000000000001, 0x7ff8000000000000} {
		x := math.Float64frombits(b)
		if h := Float16BitsFrom64(x); !nanOK(h, b>>63 != 0, 0x7c00, 0x200) {
			t.Errorf("Float16BitsFrom64(%#016x) = %#04x, want a quiet NaN", b, h)
		}
		if h := BFloat16BitsFrom64(x); !nanOK(h, b>>63 != 0, 0x7f80, 0x40) {
			t.Errorf("BFloat16BitsFrom64(%#016x) = %#04x, want a quiet NaN", b, h)
		}
	}
}

// TestMidpoints checks ties to even: the exact midpoint between every two
// adjacent finite values (computed in float64, where it is exact) rounds
// to the one with the even last bit, and its neighbours on either side
// round to the nearer one. The midpoint past the largest finite value
// rounds to Inf.
func TestMidpoints(t *testing.T) {
	type fmtCase struct {
		name    string
		maxBits uint16 // largest finite magnitude
		value   func(uint16) float64
		from32  func(float32) uint16
		from64  func(float64) uint16
	}
	for _, c := range []fmtCase{
		{"float16", 0x7bff, f16Value, Float16Bits, Float16BitsFrom64},
		{"bfloat16", 0x7f7f, bf16Value, BFloat16Bits, BFloat16BitsFrom64},
	} {
		for _, sign := range []uint16{0, 0x8000} {
			for m := uint16(0); m <= c.maxBits; m++ {
				lo, hi := sign|m, sign|(m+1) // hi may be Inf
				a, b := c.value(lo), c.value(hi)
				var mid float64
				if m == c.maxBits {
					// Beyond the largest finite value the next step would
					// be one more ulp: the overflow threshold.
					mid = a + (a-c.value(sign|(m-1)))/2
				} else {
					mid = (a + b) / 2
				}
				even := lo
				if lo&1 == 1 {
					even = hi
				}
				if got := c.from64(mid); got != even {
					t.Fatalf("%s: midpoint %v of %#04x and %#04x: got %#04x, want %#04x", c.name, mid, lo, hi, got, even)
				}
				m32 := float32(mid)
				if float64(m32) != mid {
					t.Fatalf("%s: midpoint %v is not a float32", c.name, mid)
				}
				if got := c.from32(m32); got != even {
					t.Fatalf("%s: float32 midpoint %v of %#04x and %#04x: got %#04x, want %#04x", c.name, mid, lo, hi, got, even)
				}
				toward, away := math.Inf(1), math.Inf(-1)
				if sign != 0 {
					toward, away = away, toward
				}
				// Just past the midpoint (away from zero) rounds to hi,
				// just before it to lo, in float32 and float64.
				if got := c.from32(math.Nextafter32(m32, float32(toward))); got != hi {
					t.Fatalf("%s: just above midpoint %v: got %#04x, want %#04x", c.name, mid, got, hi)
				}
				if got := c.from32(math.Nextafter32(m32, float32(away))); got != lo {
					t.Fatalf("%s: just below midpoint %v: got %#04x, want %#04x", c.name, mid, got, lo)
				}
				if got := c.from64(math.Nextafter(mid, toward)); got != hi {
					t.Fatalf("%s: float64 just above midpoint %v: got %#04x, want %#04x", c.name, mid, got, hi)
				}
				if got := c.from64(math.Nextafter(mid, away)); got != lo {
					t.Fatalf("%s: float64 just below midpoint %v: got %#04x, want %#04x", c.name, mid, got, lo)
				}
			}
		}
	}
}

// samples32 returns float32 inputs for the narrowing checks: every
// combination of the top 16 bits with low halves chosen around the
// rounding points of both formats, plus random bit patterns.
func samples32(extra int) []float32 {
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x7fff, 0x8000, 0x8001, 0xefff, 0xf000, 0xf001, 0xffff}
	out := make([]float32, 0, 1<<16*len(lows)+extra)
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			out = append(out, math.Float32frombits(hi<<16|lo))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range extra {
		out = append(out, math.Float32frombits(r.Uint32()))
	}
	return out
}

// parallel runs fn over [0, n) on every CPU.
func parallel(n int, fn func(lo, hi int)) {
	w := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for k := range w {
		wg.Add(1)
		go func(lo, hi int) { defer wg.Done(); fn(lo, hi) }(n*k/w, n*(k+1)/w)
	}
	wg.Wait()
}

// TestNarrowingReference compares both narrowing functions with the
// big.Float reference, and the float32 ones with their float64 versions,
// on about a million float32 values.
func TestNarrowingReference(t *testing.T) {
	xs := samples32(100000)
	if testing.Short() {
		xs = xs[len(xs)-100000:]
	}
	var mu sync.Mutex
	fails := 0
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if fails++; fails <= 10 {
			t.Errorf(format, args...)
		}
	}
	parallel(len(xs), func(lo, hi int) {
		for _, x := range xs[lo:hi] {
			x64 := float64(x)
			nan := math.IsNaN(x64)
			h := Float16Bits(x)
			if nan {
				if !nanOK(h, math.Signbit(x64), 0x7c00, 0x200) {
					fail("Float16Bits(%#08x) = %#04x, want a quiet NaN", math.Float32bits(x), h)
				}
			} else if want := refF16(x64); !sameValue(f16Value(h), want) {
				fail("Float16Bits(%v = %#08x) = %#04x (%v), want %v", x, math.Float32bits(x), h, f16Value(h), want)
			}
			if h64 := Float16BitsFrom64(x64); h64 != h {
				fail("Float16BitsFrom64(%v) = %#04x, Float16Bits = %#04x", x, h64, h)
			}
			b := BFloat16Bits(x)
			if nan {
				if !nanOK(b, math.Signbit(x64), 0x7f80, 0x40) {
					fail("BFloat16Bits(%#08x) = %#04x, want a quiet NaN", math.Float32bits(x), b)
				}
			} else if want := refBF16(x64); !sameValue(bf16Value(b), want) {
				fail("BFloat16Bits(%v = %#08x) = %#04x (%v), want %v", x, math.Float32bits(x), b, bf16Value(b), want)
			}
			if b64 := BFloat16BitsFrom64(x64); b64 != b {
				fail("BFloat16BitsFrom64(%v) = %#04x, BFloat16Bits = %#04x", x, b64, b)
			}
		}
	})
}

// TestNarrowingFrom64 checks the float64 versions on values a float32
// cannot hold, where rounding through float32 first would round twice.
func TestNarrowingFrom64(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	xs := []float64{
		1 + 0x1p-11 + 0x1p-40, // above a float16 tie by less than a float32 ulp
		1 + 0x1p-8 + 0x1p-40,  // the same for bfloat16
		-(1 + 0x1p-11 + 0x1p-40),
		0x1p-25 + 0x1p-60, // just above half the smallest float16 subnormal
		0x1p-25,           // exactly half: ties to even, to zero
		-0x1p-25,
		0x1p-134 + 0x1p-170, // just above half the smallest bfloat16 subnormal
		65520 - 0x1p-30,     // just below the float16 overflow threshold
		65520,
		1e300, -1e300, 1e-300, -1e-300, math.SmallestNonzeroFloat64, math.MaxFloat64,
		math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1),
	}
	for range 200000 {
		// Random magnitudes around both formats' ranges, full float64
		// significands.
		xs = append(xs, math.Ldexp(1+r.Float64(), r.IntN(300)-150)*float64(1-2*r.IntN(2)))
	}
	for _, x := range xs {
		if got, want := f16Value(Float16BitsFrom64(x)), refF16(x); !sameValue(got, want) {
			t.Fatalf("Float16BitsFrom64(%v) = %v, want %v", x, got, want)
		}
		if got, want := bf16Value(BFloat16BitsFrom64(x)), refBF16(x); !sameValue(got, want) {
			t.Fatalf("BFloat16BitsFrom64(%v) = %v, want %v", x, got, want)
		}
	}
}

// TestMonotonic checks that narrowing never reverses the order of two
// values, over the sorted non-NaN float32 samples.
func TestMonotonic(t *testing.T) {
	// Walk the float32 line in order: negative patterns descending in
	// magnitude, then positive ones ascending, stepping through the low
	// bits around the rounding points.
	lows := []uint32{0, 0x0fff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001, 0xffff}
	var seq []float32
	for hi := int(0xff7f); hi >= 0x8000; hi-- {
		for k := len(lows) - 1; k >= 0; k-- {
			seq = append(seq, math.Float32frombits(uint32(hi)<<16|lows[k]))
		}
	}
	for hi := range uint32(0x7f80) {
		for _, lo := range lows {
			seq = append(seq, math.Float32frombits(hi<<16|lo))
		}
	}
	prev16, prevBF := math.Inf(-1), math.Inf(-1)
	for i, x := range seq {
		if i > 0 && !(seq[i-1] <= x) {
			t.Fatalf("sequence not sorted at %d: %v then %v", i, seq[i-1], x)
		}
		v16, vbf := float64(Float16FromBits(Float16Bits(x))), float64(BFloat16FromBits(BFloat16Bits(x)))
		if v16 < prev16 || vbf < prevBF {
			t.Fatalf("not monotonic at %v: float16 %v after %v, bfloat16 %v after %v", x, v16, prev16, vbf, prevBF)
		}
		prev16, prevBF = v16, vbf
	}
}

// TestNumpyFixture compares Float16Bits with numpy's float32→float16
// conversion (testdata/gen_numpy_float16.py) bit for bit, except NaNs,
// which numpy does not quieten: there only NaN-ness and the sign count.
func TestNumpyFixture(t *testing.T) {
	f, err := os.Open("testdata/numpy_float16.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		var xb, hb uint64
		fs := strings.Fields(line)
		if len(fs) == 2 {
			xb, err = strconv.ParseUint(fs[0], 16, 32)
			if err == nil {
				hb, err = strconv.ParseUint(fs[1], 16, 16)
			}
		}
		if len(fs) != 2 || err != nil {
			t.Fatalf("bad fixture line %q", line)
		}
		x, want := math.Float32frombits(uint32(xb)), uint16(hb)
		got := Float16Bits(x)
		if want&0x7c00 == 0x7c00 && want&0x3ff != 0 {
			if !nanOK(got, want&0x8000 != 0, 0x7c00, 0x200) {
				t.Errorf("Float16Bits(%#08x) = %#04x, numpy gives NaN %#04x", xb, got, want)
			}
		} else if got != want {
			t.Errorf("Float16Bits(%v = %#08x) = %#04x, numpy gives %#04x", x, xb, got, want)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 4000 {
		t.Fatalf("fixture has %d values, want thousands", n)
	}
	t.Logf("%d values agree with numpy", n)
}

// TestSlices checks the slice helpers against the scalar functions.
func TestSlices(t *testing.T) {
	src := []float32{0, 1, -2.5, 65504, 1e-7, float32(math.Inf(-1)), 3.14159}
	h, b := Float16s(src), BFloat16s(src)
	back16, backBF := make([]float32, len(src)+2), make([]float32, len(src))
	if n := DecodeFloat16(back16, h); n != len(src) {
		t.Fatalf("DecodeFloat16 converted %d, want %d", n, len(src))
	}
	if n := DecodeBFloat16(backBF, b); n != len(src) {
		t.Fatalf("DecodeBFloat16 converted %d, want %d", n, len(src))
	}
	short := make([]uint16, 3)
	if n := EncodeFloat16(short, src); n != 3 || short[2] != Float16Bits(src[2]) {
		t.Fatalf("EncodeFloat16 into 3: n=%d %v", n, short)
	}
	if n := EncodeBFloat16(short, src[:2]); n != 2 {
		t.Fatalf("EncodeBFloat16 of 2: n=%d", n)
	}
	for i, x := range src {
		if h[i] != Float16Bits(x) || back16[i] != Float16FromBits(h[i]) {
			t.Errorf("float16 %d: %#04x %v", i, h[i], back16[i])
		}
		if b[i] != BFloat16Bits(x) || backBF[i] != BFloat16FromBits(b[i]) {
			t.Errorf("bfloat16 %d: %#04x %v", i, b[i], backBF[i])
		}
	}
}

// TestExhaustive32 compares the float32 narrowing with the float64 one
// (independent code paths: bit rounding against the generic significand
// rounding, which TestNarrowingFrom64 checks against big.Float) on every
// one of the 2³² float32 bit patterns. It takes tens of seconds, so it
// runs only with FORGE_HALF_EXHAUSTIVE=1.
func TestExhaustive32(t *testing.T) {
	if os.Getenv("FORGE_HALF_EXHAUSTIVE") != "1" {
		t.Skip("set FORGE_HALF_EXHAUSTIVE=1 to check all 2³² float32 values")
	}
	var mu sync.Mutex
	bad := 0
	parallel(1<<16, func(lo, hi int) {
		for top := lo; top < hi; top++ {
			for low := range uint32(1 << 16) {
				x := math.Float32frombits(uint32(top)<<16 | low)
				h, h64 := Float16Bits(x), Float16BitsFrom64(float64(x))
				b, b64 := BFloat16Bits(x), BFloat16BitsFrom64(float64(x))
				if h != h64 || b != b64 {
					mu.Lock()
					if bad++; bad <= 10 {
						t.Errorf("%#08x: float16 %#04x vs %#04x, bfloat16 %#04x vs %#04x", math.Float32bits(x), h, h64, b, b64)
					}
					mu.Unlock()
				}
			}
		}
	})
}
