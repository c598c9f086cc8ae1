package forge

import (
	"math"
	"math/bits"

	"github.com/forgeml/forge/forge/half"
)

// Generator is Forge's seeded random number generator. It runs on the host,
// so the same seed gives the same tensors on every backend and platform.
//
// The algorithm is fixed and documented so results can be reproduced
// elsewhere:
//
//   - State: xoshiro256** (Blackman and Vigna), four uint64 words, seeded by
//     running SplitMix64 from the seed and taking four outputs.
//   - Uniform floats in [0, 1): (next() >> 11) · 2⁻⁵³, rounded to the
//     tensor's dtype (a float32 value that rounds to 1 is replaced by the
//     largest float32 below 1).
//   - Normal values: Box–Muller on pairs of uniforms, u1 = 1 − uniform (so
//     u1 ∈ (0, 1]), z0 = √(−2 ln u1)·cos(2πu2), z1 = √(−2 ln u1)·sin(2πu2);
//     elements are filled in order z0, z1, z0, z1, ….
//   - Integers in [lo, hi): Lemire's multiply-shift with rejection on the
//     64-bit output, unbiased.
type Generator struct {
	s [4]uint64
}

// NewGenerator returns a generator seeded with seed.
func NewGenerator(seed uint64) *Generator {
	g := &Generator{}
	g.Seed(seed)
	return g
}

// Seed resets the generator to the state derived from seed.
func (g *Generator) Seed(seed uint64) {
	x := seed
	for i := range g.s {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		g.s[i] = z ^ (z >> 31)
	}
}

// State returns the generator's state, for checkpoints.
func (g *Generator) State() [4]uint64 { return g.s }

// SetState restores a state returned by State.
func (g *Generator) SetState(s [4]uint64) { g.s = s }

// Uint64 returns the next 64 random bits (xoshiro256**).
func (g *Generator) Uint64() uint64 {
	if curRNGLog != nil {
		noteDraw(g) // inside a Checkpoint: its backward replays the draws
	}
	s := &g.s
	r := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return r
}

// Float64 returns a uniform value in [0, 1).
func (g *Generator) Float64() float64 { return float64(g.Uint64()>>11) * 0x1p-53 }

// Intn returns a uniform integer in [0, n); n must be positive.
func (g *Generator) Intn(n int) int {
	if n <= 0 {
		panic(errorf("rand_int", "bound must be positive, got %d", n))
	}
	bound := uint64(n)
	hi, lo := bits.Mul64(g.Uint64(), bound)
	if lo < bound {
		thresh := -bound % bound
		for lo < thresh {
			hi, lo = bits.Mul64(g.Uint64(), bound)
		}
	}
	return int(hi)
}

// NormFloat64 fills out with standard normal values (Box–Muller pairs).
func (g *Generator) normals(out []float64) {
	for i := 0; i < len(out); i += 2 {
		u1 := 1 - g.Float64()
		u2 := g.Float64()
		r := math.Sqrt(-2 * math.Log(u1))
		s, c := math.Sincos(2 * math.Pi * u2)
		out[i] = r * c
		if i+1 < len(out) {
			out[i+1] = r * s
		}
	}
}

var defaultGen = NewGenerator(0)

// DefaultGenerator returns the generator used by Randn, Rand and RandInt.
func DefaultGenerator() *Generator { return defaultGen }

// Seed reseeds the default generator.
func Seed(seed uint64) { defaultGen.Seed(seed) }

// Randn returns a float32 tensor of standard normal values from the
// default generator.
func Randn(shape ...int) *Tensor { return defaultGen.Randn(Float32, shape...) }

// Rand returns a float32 tensor of uniform values in [0, 1) from the
// default generator.
func Rand(shape ...int) *Tensor { return defaultGen.Rand(Float32, shape...) }

// RandInt returns an int32 tensor of uniform integers in [lo, hi) from the
// default generator.
func RandInt(lo, hi int, shape ...int) *Tensor { return defaultGen.RandInt(lo, hi, shape...) }

// Randn returns a tensor of standard normal values of dtype dt.
func (g *Generator) Randn(dt DType, shape ...int) *Tensor {
	checkShape("randn", shape)
	checkBudgetStaged("randn", DefaultDevice(), dt, shape, 8)
	v := make([]float64, numel(shape))
	g.normals(v)
	return fromFloat64s("randn", dt, v, shape)
}

// Rand returns a tensor of uniform values in [0, 1) of dtype dt.
func (g *Generator) Rand(dt DType, shape ...int) *Tensor {
	checkShape("rand", shape)
	checkBudgetStaged("rand", DefaultDevice(), dt, shape, 8)
	v := make([]float64, numel(shape))
	for i := range v {
		v[i] = g.Float64()
		if dt == Float32 && float32(v[i]) == 1 {
			v[i] = float64(math.Nextafter32(1, 0))
		}
	}
	return fromFloat64s("rand", dt, v, shape)
}

// RandInt returns an int32 tensor of uniform integers in [lo, hi).
func (g *Generator) RandInt(lo, hi int, shape ...int) *Tensor {
	checkShape("rand_int", shape)
	if hi <= lo {
		panic(errorf("rand_int", "empty range [%d, %d)", lo, hi))
	}
	if lo < math.MinInt32 || hi-1 > math.MaxInt32 {
		panic(errorf("rand_int", "range [%d, %d) does not fit int32", lo, hi))
	}
	checkBudgetStaged("rand_int", DefaultDevice(), Int32, shape, 4)
	v := make([]int32, numel(shape))
	for i := range v {
		v[i] = int32(lo + g.Intn(hi-lo))
	}
	return exactShape(FromSlice(v, shape...), shape)
}

// exactShape makes t 0-d when shape is empty (FromSlice makes it 1-D).
func exactShape(t *Tensor, shape []int) *Tensor {
	if len(shape) == 0 {
		return t.Reshape()
	}
	return t
}

// fromFloat64s makes a tensor of dtype dt from float64 host values.
func fromFloat64s(op string, dt DType, v []float64, shape []int) *Tensor {
	switch dt {
	case Float64:
		return exactShape(FromSlice(v, shape...), shape)
	case Float32:
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return exactShape(FromSlice(f, shape...), shape)
	case Float16, BFloat16:
		// Rounded once from float64 (through float32 would round twice).
		bits := make([]uint16, len(v))
		for i, x := range v {
			if dt == Float16 {
				bits[i] = half.Float16BitsFrom64(x)
			} else {
				bits[i] = half.BFloat16BitsFrom64(x)
			}
		}
		checkShape(op, shape)
		dev := DefaultDevice()
		t := newTensor(dev, dt, shape)
		dev.b.Write(t.buf, bits)
		return t
	}
	panic(errorf(op, "needs a float dtype, got %v", dt))
}
