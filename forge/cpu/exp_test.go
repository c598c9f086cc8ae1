package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// expRefLn2 is ln 2 to 60 digits.
var expRefLn2, _ = new(big.Float).SetPrec(200).SetString("0.693147180559945309417232121458176568075500134360255254120680")

// expRef returns e^x to about 120 bits (x finite): e^x = 2^k·e^r with
// r = x − k·ln2, e^r summed from its Taylor series.
func expRef(x float64) *big.Float {
	const prec = 160
	k := math.Round(x / math.Ln2)
	r := new(big.Float).SetPrec(prec).SetFloat64(x)
	r.Sub(r, new(big.Float).SetPrec(prec).Mul(new(big.Float).SetPrec(prec).SetFloat64(k), expRefLn2))
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	for n := int64(1); n < 60; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(n))
		sum.Add(sum, term)
	}
	return sum.SetMantExp(sum, int(k))
}

// expRef64 and expRef32 are e^x correctly rounded to float64 and float32.
func expRef64(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x > 710 || x < -746 {
		return math.Exp(x)
	}
	f, _ := expRef(x).Float64()
	return f
}

func expRef32(x float32) float32 {
	if x != x || math.IsInf(float64(x), 0) || x > 100 || x < -110 {
		return float32(math.Exp(float64(x)))
	}
	f, _ := expRef(float64(x)).Float32()
	return f
}

// ulp32 returns the distance in float32 ulps between a and b (0 when both
// are NaN; a huge value when only one is, or for opposite infinities).
func ulp32(a, b float32) int64 {
	if a != a || b != b {
		if a != a && b != b {
			return 0
		}
		return math.MaxInt32
	}
	ord := func(f float32) int64 {
		u := math.Float32bits(f)
		if u&0x80000000 != 0 {
			return -int64(u & 0x7fffffff)
		}
		return int64(u)
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return d
}

func TestExpf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst, worstX := 0.0, 0.0
	check := func(x float64) {
		got, want := expf(x), expRef64(x)
		switch {
		case math.IsNaN(want) || math.IsInf(want, 0) || want == 0:
			if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
				t.Errorf("expf(%v) = %v, want %v", x, got, want)
			}
		case want < 0x1p-1022: // denormal: compare absolutely
			if math.Abs(got-want) > 0x1p-1074 {
				t.Errorf("expf(%v) = %v, want %v", x, got, want)
			}
		default:
			if e := math.Abs(got-want) / want; e > worst {
				worst, worstX = e, x
			}
		}
	}
	for i := range 50_000 {
		switch i % 4 {
		case 0:
			check(1500*rng.Float64() - 750)
		case 1:
			check(40*rng.Float64() - 20)
		case 2:
			check(float64(float32(210*rng.Float64() - 110)))
		default:
			check(1e-3 * (2*rng.Float64() - 1))
		}
	}
	for _, x := range []float64{0, math.Copysign(0, -1), 1, -1, math.Ln2, 709, 709.78, 709.79, 710, 711, -708, -709, -745, -745.13, -745.14, -746, -747,
		math.Inf(1), math.Inf(-1), math.NaN(), math.MaxFloat64, -math.MaxFloat64, 1e-300, -1e-300, math.Ln2 / 128, -math.Ln2 / 128} {
		check(x)
	}
	t.Logf("expf worst relative error %.3g at %v", worst, worstX)
	if worst > 1e-15 {
		t.Errorf("expf worst relative error %.3g at %v, want ≤ 1e-15", worst, worstX)
	}
}

// expSweep32 returns float32 inputs covering the whole range of exp: every
// step-th float32 below 128 in magnitude (both signs), plus the edges of
// the finite, normal and denormal result ranges.
func expSweep32(step uint32) []float32 {
	var xs []float32
	for u := uint32(0); u < math.Float32bits(128); u += step {
		f := math.Float32frombits(u)
		xs = append(xs, f, -f)
	}
	for _, x := range []float64{88.72283935546875, 88.7228470, 88.72283, 88.7229, 89, -87.33654, -87.3365, -103.2789, -103.9721, -104, -103.27893,
		-87.33654022216797, 1e-45, -1e-45, 1e-38, -1e-38} {
		f := float32(x)
		xs = append(xs, f, math.Nextafter32(f, 1e9), math.Nextafter32(f, -1e9))
	}
	return xs
}

// TestExpSlice32Accuracy checks e^x rounded to float32 against math.Exp
// rounded to float32 over a dense sweep (every 61st float32 below 128 in
// magnitude, about 70 million values), denormal and overflowing results
// included. It wants at most 1 ulp and almost always 0.
func TestExpSlice32Accuracy(t *testing.T) {
	step := uint32(61)
	if testing.Short() {
		step = 1021
	}
	xs := expSweep32(step)
	got := make([]float32, len(xs))
	for _, k := range expKernelSets() {
		k.shiftSum(got, xs, 0, 1)
		var worst int64
		var worstX float32
		off := 0
		for i, x := range xs {
			// math.Exp rounded to float32 is nearly always correctly rounded;
			// where it disagrees, ask the exact reference.
			if got[i] == float32(math.Exp(float64(x))) {
				continue
			}
			if d := ulp32(got[i], expRef32(x)); d != 0 {
				off++
				if d > worst {
					worst, worstX = d, x
				}
			}
		}
		t.Logf("%s: %d inputs, %d results not correctly rounded, worst %d ulp at %v", k.name, len(xs), off, worst, worstX)
		if worst > 1 || off > len(xs)/1_000_000 {
			t.Errorf("%s: worst error %d ulp at %v; %d of %d results off", k.name, worst, worstX, off, len(xs))
		}
	}
}

// TestExpSlice32Exhaustive checks every float32 (about 4.3 billion); it
// takes a few minutes and runs only with FORGE_EXP_EXHAUSTIVE=1.
func TestExpSlice32Exhaustive(t *testing.T) {
	if os.Getenv("FORGE_EXP_EXHAUSTIVE") == "" {
		t.Skip("set FORGE_EXP_EXHAUSTIVE=1 to run")
	}
	const chunk = 1 << 20
	xs, got := make([]float32, chunk), make([]float32, chunk)
	for _, k := range expKernelSets() {
		var worst int64
		var worstX float32
		off := 0
		for base := uint64(0); base < 1<<32; base += chunk {
			for i := range xs {
				xs[i] = math.Float32frombits(uint32(base + uint64(i)))
			}
			k.shiftSum(got, xs, 0, 1)
			for i, x := range xs {
				if got[i] == float32(math.Exp(float64(x))) {
					continue
				}
				if d := ulp32(got[i], expRef32(x)); d != 0 {
					off++
					if d > worst {
						worst, worstX = d, x
					}
				}
			}
		}
		t.Logf("%s, all float32: %d results not correctly rounded, worst %d ulp at %v", k.name, off, worst, worstX)
		if worst > 1 {
			t.Errorf("%s: worst error %d ulp at %v", k.name, worst, worstX)
		}
	}
}

func TestExpSlice32SpecialValues(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	cases := []struct{ x, want float32 }{
		{0, 1}, {float32(math.Copysign(0, -1)), 1}, {1e-45, 1}, {-1e-45, 1},
		{nan, nan}, {inf, inf}, {-inf, 0},
		{-1e30, 0}, {1e30, inf}, {math.MaxFloat32, inf}, {-math.MaxFloat32, 0},
		{89, inf}, {-104, 0}, {-110, 0}, {100, inf},
		{88.72283935546875, float32(math.Exp(88.72283935546875))}, // the largest finite result
		{-103.27893, float32(math.Exp(-103.27893))},               // the smallest denormal
	}
	for _, k := range expKernelSets() {
		for _, c := range cases {
			// Each value alone (the masked tail) and in a full block of 8.
			for _, n := range []int{1, 8} {
				src := make([]float32, n)
				for i := range src {
					src[i] = c.x
				}
				dst := make([]float32, n)
				k.shiftSum(dst, src, 0, 1)
				for i, v := range dst {
					if ulp32(v, c.want) != 0 || math.Signbit(float64(v)) != math.Signbit(float64(c.want)) {
						t.Errorf("%s: exp(%v) = %v (lane %d of %d), want %v", k.name, c.x, v, i, n, c.want)
					}
				}
			}
		}
	}
}

// TestExpShiftSum32 checks shift, scale, the float64 sum, sum-only calls,
// aliasing, every tail length and that nothing past len(src) is written.
func TestExpShiftSum32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, k := range expKernelSets() {
		for n := 0; n <= 37; n++ {
			for _, shift := range []float64{0, 2.5, -30.25, 87.125} {
				scale := 0.37
				src := make([]float32, n)
				for i := range src {
					src[i] = float32(shift + 12*rng.NormFloat64())
				}
				dst := make([]float32, n+5)
				for i := range dst {
					dst[i] = -7
				}
				sum := k.shiftSum(dst[:n], src, shift, scale)
				want := 0.0
				for i, v := range src {
					e := math.Exp(float64(v) - shift)
					want += e
					if w := float32(scale * e); ulp32(dst[i], w) > 1 {
						t.Fatalf("%s n=%d: dst[%d] = %v, want %v", k.name, n, i, dst[i], w)
					}
				}
				for i := n; i < len(dst); i++ {
					if dst[i] != -7 {
						t.Fatalf("%s n=%d: dst[%d] written past the end", k.name, n, i)
					}
				}
				if math.Abs(sum-want) > 1e-14*want {
					t.Errorf("%s n=%d shift=%v: sum %v, want %v", k.name, n, shift, sum, want)
				}
				if s := k.shiftSum(nil, src, shift, scale); s != sum {
					t.Errorf("%s n=%d: sum-only call gives %v, storing call %v", k.name, n, s, sum)
				}
				alias := append([]float32(nil), src...)
				k.shiftSum(alias, alias, shift, scale)
				for i := range alias {
					if alias[i] != dst[i] {
						t.Fatalf("%s n=%d: in-place result %v at %d, want %v", k.name, n, alias[i], i, dst[i])
					}
				}
			}
		}
	}
}

func TestExpShift64(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// Accuracy of the float64 values over the float32 range and beyond.
	for _, k := range expKernelSets() {
		const n = 30_000
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(220*rng.Float64() - 110)
		}
		dst := make([]float64, n)
		k.shift64(dst, src, -0.375)
		worst := 0.0
		for i, v := range src {
			want := expRef64(float64(v) + 0.375)
			worst = max(worst, math.Abs(dst[i]-want)/want)
		}
		t.Logf("%s: worst relative error of the float64 values %.3g", k.name, worst)
		if worst > 1e-15 {
			t.Errorf("%s: worst relative error %.3g > 1e-15", k.name, worst)
		}
	}
	for _, k := range expKernelSets() {
		fn := k.shift64
		for n := 0; n <= 21; n++ {
			src := make([]float32, n)
			for i := range src {
				src[i] = float32(20 * rng.NormFloat64())
			}
			src = append(src, float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)))[:n]
			dst := make([]float64, n+3)
			dst[n] = -7
			fn(dst[:n], src, 1.5)
			for i, v := range src {
				want := expRef64(float64(v) - 1.5)
				if !(math.Abs(dst[i]-want) <= 1e-15*want || dst[i] == want || math.IsNaN(want) && math.IsNaN(dst[i])) {
					t.Errorf("n=%d: exp(%v − 1.5) = %v, want %v", n, v, dst[i], want)
				}
			}
			if dst[n] != -7 {
				t.Errorf("n=%d: written past the end", n)
			}
		}
		x := []float32{float32(math.NaN()), float32(math.Inf(-1)), float32(math.Inf(1)), 0, -1e30, 1e30, 709, -745}
		dst := make([]float64, len(x))
		fn(dst, x, 0)
		for i, v := range x {
			want := expRef64(float64(v))
			if !(dst[i] == want || math.IsNaN(want) && math.IsNaN(dst[i]) || math.Abs(dst[i]-want) <= 1e-15*want) {
				t.Errorf("exp(%v) = %v, want %v", v, dst[i], want)
			}
		}
	}
}

// sigmoidRef is the float64 reference of each sigmoid32 op, in the form of
// the portable kernel but with math.Exp.
func sigmoidRef(op int, x, g float64) float64 {
	switch op {
	case sigSigmoid:
		return 1 / (1 + math.Exp(-x))
	case sigSiLU:
		return x / (1 + math.Exp(-x))
	case sigGELUTanh:
		return x / (1 + math.Exp(-2*geluK*(x+geluC*x*x*x)))
	case sigTanh:
		return math.Tanh(x)
	case sigSiLUGrad:
		sg := 1 / (1 + math.Exp(-x))
		return g * sg * (1 + x*(1-sg))
	case sigGELUGrad:
		sg := 1 / (1 + math.Exp(-2*geluK*(x+geluC*x*x*x)))
		return g * (sg + 2*x*sg*(1-sg)*geluK*(1+3*geluC*x*x))
	}
	panic(op)
}

// TestSigmoid32 checks the fused ops, assembly and portable, against their
// float64 references rounded to float32 on random inputs over the ranges
// where they change (and far beyond), every tail length, and special values.
func TestSigmoid32(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"sigmoid", "silu", "gelu_tanh", "tanh", "silu_grad", "gelu_tanh_grad"}
	inf, nan := math.Inf(1), math.NaN()
	specials := []float64{0, math.Copysign(0, -1), nan, inf, -inf, 1e30, -1e30, 100, -100, -200, 1e-30, -1e-30, 1.0 / 32, -1.0 / 32, 0.03, -1.2785}
	for op := sigSigmoid; op <= sigGELUGrad; op++ {
		for _, k := range expKernelSets() {
			const n = 100_003
			x, g := make([]float32, n), make([]float32, n)
			for i := range x {
				switch i % 3 {
				case 0:
					x[i] = float32(8 * rng.NormFloat64())
				case 1:
					x[i] = float32(0.2 * rng.NormFloat64())
				default:
					x[i] = float32(240*rng.Float64() - 120)
				}
				g[i] = float32(4*rng.Float64() - 2)
			}
			for i, v := range specials {
				x[i] = float32(v)
			}
			dst := make([]float32, n)
			k.sigmoid(op, dst, x, g)
			worst, off := int64(0), 0
			for i := range x {
				want := float32(sigmoidRef(op, float64(x[i]), float64(g[i])))
				d := ulp32(dst[i], want)
				if d > 0 {
					off++
				}
				// Near the root of the SiLU derivative (x ≈ −1.28) the float64
				// formula itself cancels: allow 1e-12 absolute there.
				if d > 1 && !(op == sigSiLUGrad && math.Abs(float64(dst[i])-float64(want)) < 1e-12) {
					if worst <= 1 {
						t.Errorf("%s %s: f(%v, g=%v) = %v, want %v (%d ulp)", k.name, names[op], x[i], g[i], dst[i], want, d)
					}
				}
				worst = max(worst, d)
			}
			t.Logf("%s %s: %d of %d results off by an ulp or more, worst %d", k.name, names[op], off, n, worst)
			// Tails: each length 0..11, in place, never writing past the end.
			for m := 0; m <= 11; m++ {
				buf := make([]float32, m+4)
				copy(buf, x[100:100+m])
				for i := m; i < len(buf); i++ {
					buf[i] = -7
				}
				k.sigmoid(op, buf[:m], buf[:m], g[100:100+m])
				for i := range m {
					if buf[i] != dst[100+i] && !(buf[i] != buf[i] && dst[100+i] != dst[100+i]) {
						t.Fatalf("%s %s: length %d in place: element %d = %v, want %v", k.name, names[op], m, i, buf[i], dst[100+i])
					}
				}
				for i := m; i < len(buf); i++ {
					if buf[i] != -7 {
						t.Fatalf("%s %s: length %d: written past the end", k.name, names[op], m)
					}
				}
			}
		}
	}
}

// TestExpKernelsAgree checks that the implementations round to the same
// float32 almost everywhere (they compute e^x differently, all to a few
// 1e-16) and agree on sums, for each kernel.
func TestExpKernelsAgree(t *testing.T) {
	sets := expKernelSets()
	rng := rand.New(rand.NewPCG(9, 10))
	const n = 1 << 20
	x, g := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(30 * rng.NormFloat64())
		g[i] = float32(rng.NormFloat64())
	}
	type result struct {
		e   []float32
		sum float64
		sig [sigGELUGrad + 1][]float32
	}
	res := make([]result, len(sets))
	for i, k := range sets {
		r := &res[i]
		r.e = make([]float32, n)
		r.sum = k.shiftSum(r.e, x, 0.5, 1)
		for op := range r.sig {
			r.sig[op] = make([]float32, n)
			k.sigmoid(op, r.sig[op], x, g)
		}
	}
	count := func(a, b []float32) (diff int) {
		for i := range a {
			if ulp32(a[i], b[i]) != 0 {
				diff++
			}
		}
		return diff
	}
	for i := 1; i < len(sets); i++ {
		a, b := &res[0], &res[i]
		if d := count(a.e, b.e); d > 2 || math.Abs(a.sum-b.sum) > 1e-15*a.sum {
			t.Errorf("exp: %s and %s differ in %d of %d results; sums %v and %v", sets[0].name, sets[i].name, d, n, a.sum, b.sum)
		}
		for op := range a.sig {
			if d := count(a.sig[op], b.sig[op]); d > 2 {
				t.Errorf("sigmoid op %d: %s and %s differ in %d of %d results", op, sets[0].name, sets[i].name, d, n)
			}
		}
	}
}

func BenchmarkExpSlice32(bb *testing.B) {
	for _, n := range []int{256, 1 << 20} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%1000)/100 - 5
		}
		y := make([]float32, n)
		for _, k := range expKernelSets() {
			bb.Run(fmt.Sprintf("%s/%d", k.name, n), func(bb *testing.B) {
				bb.SetBytes(int64(8 * n))
				for bb.Loop() {
					k.shiftSum(y, x, 0, 1)
				}
			})
		}
	}
}

func BenchmarkSigmoid32(bb *testing.B) {
	const n = 1 << 16
	x, g, y := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000)/100 - 5
		g[i] = 1
	}
	names := []string{"sigmoid", "silu", "gelu_tanh", "tanh", "silu_grad", "gelu_tanh_grad"}
	for op, name := range names {
		for _, k := range expKernelSets() {
			bb.Run(name+"/"+k.name, func(bb *testing.B) {
				bb.SetBytes(int64(8 * n))
				for bb.Loop() {
					k.sigmoid(op, y, x, g)
				}
			})
		}
	}
}

// BenchmarkSiLU1M times the float32 SiLU forward and its gradient on 1M
// elements (the MLP activation of a small GPT step).
func BenchmarkSiLU1M(bb *testing.B) {
	b := New()
	const n = 1 << 20
	shape, strides := []int{n}, []int{1}
	x := ewBenchVec(b, backend.Float32, shape, strides)
	y := ewBenchVec(b, backend.Float32, shape, strides)
	g := ewBenchVec(b, backend.Float32, shape, strides)
	dx := ewBenchVec(b, backend.Float32, shape, strides)
	bb.Run("fwd", func(bb *testing.B) {
		bb.SetBytes(2 * 4 * n)
		for bb.Loop() {
			b.Unary(backend.SiLU, backend.Scalars{}, y, x)
		}
	})
	bb.Run("grad", func(bb *testing.B) {
		bb.SetBytes(3 * 4 * n)
		for bb.Loop() {
			b.UnaryGrad(backend.SiLU, backend.Scalars{}, dx, x, y, g)
		}
	})
}
