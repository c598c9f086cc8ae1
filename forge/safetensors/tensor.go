package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// MaxRank is the largest number of dimensions a tensor may have. Marshal and
// Unmarshal both reject more; the bound keeps a hostile header from making
// the reader build enormous shape slices.
const MaxRank = 64

// Tensor is one named tensor: its element type, its shape (row-major; an
// empty shape is a scalar, a shape containing 0 has no elements) and its
// elements as raw little-endian bytes, exactly len = product(Shape) *
// DType.Size().
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// byteLen returns how many bytes a tensor of dtype d and the given shape
// holds, or an error if d is unknown, a dimension is negative, the rank is
// above MaxRank or the size does not fit in an int.
func byteLen(d DType, shape []int) (int, error) {
	size := d.Size()
	if size == 0 {
		return 0, fmt.Errorf("unknown dtype %q (supported: %s)", string(d), supportedDTypes())
	}
	if len(shape) > MaxRank {
		return 0, fmt.Errorf("shape has %d dimensions, more than the limit of %d", len(shape), MaxRank)
	}
	empty := false
	for _, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		if s == 0 {
			empty = true
		}
	}
	if empty {
		return 0, nil
	}
	n := uint64(size)
	for _, s := range shape {
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 || lo > math.MaxInt {
			return 0, fmt.Errorf("shape %v of %s elements is too large: its byte size overflows an int", shape, d)
		}
		n = lo
	}
	return int(n), nil
}

// check reports whether t's dtype, shape and data length agree. The message
// does not name the tensor; callers add that.
func (t Tensor) check() error {
	n, err := byteLen(t.DType, t.Shape)
	if err != nil {
		return err
	}
	if len(t.Data) != n {
		return fmt.Errorf("shape %v with dtype %s needs %d bytes of data but Data has %d (fix the shape or the data)",
			t.Shape, t.DType, n, len(t.Data))
	}
	return nil
}

// F32 returns a float32 tensor holding a copy of v. The shape is copied
// too; a nil or empty shape makes a scalar. The constructors do not check
// that len(v) matches the shape: Marshal, WriteFile and the accessor
// methods report a mismatch.
func F32(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: DTypeF32, Shape: cloneShape(shape), Data: b}
}

// F64 returns a float64 tensor holding a copy of v; see F32.
func F64(name string, shape []int, v []float64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return Tensor{Name: name, DType: DTypeF64, Shape: cloneShape(shape), Data: b}
}

// F16 returns an IEEE half-precision tensor holding v rounded to the
// nearest half (ties to even; values beyond ±65504 round to infinity, NaN
// stays NaN); see F32.
func F16(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], float32ToF16(x))
	}
	return Tensor{Name: name, DType: DTypeF16, Shape: cloneShape(shape), Data: b}
}

// BF16 returns a bfloat16 tensor holding v rounded to the nearest bfloat16
// (ties to even, NaN stays NaN); see F32.
func BF16(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], float32ToBF16(x))
	}
	return Tensor{Name: name, DType: DTypeBF16, Shape: cloneShape(shape), Data: b}
}

// I32 returns an int32 tensor holding a copy of v; see F32.
func I32(name string, shape []int, v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{Name: name, DType: DTypeI32, Shape: cloneShape(shape), Data: b}
}

// I64 returns an int64 tensor holding a copy of v; see F32.
func I64(name string, shape []int, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: DTypeI64, Shape: cloneShape(shape), Data: b}
}

// U8 returns a uint8 tensor holding a copy of v; see F32.
func U8(name string, shape []int, v []byte) Tensor {
	return Tensor{Name: name, DType: DTypeU8, Shape: cloneShape(shape), Data: slices.Clone(v)}
}

func cloneShape(shape []int) []int {
	if shape == nil {
		return []int{}
	}
	return slices.Clone(shape)
}

// elements checks t and returns its number of elements.
func (t Tensor) elements() (int, error) {
	if err := t.check(); err != nil {
		return 0, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	return len(t.Data) / t.DType.Size(), nil
}

func wrongDType(t Tensor, method, accepted, hint string) error {
	return fmt.Errorf("safetensors: tensor %q: %s reads %s tensors, not %s%s", t.Name, method, accepted, t.DType, hint)
}

// Float32s returns the elements of an F32, F16 or BF16 tensor as float32.
// Half and bfloat16 values widen exactly. Other dtypes are an error (F64
// would lose precision: use Float64s), as is a shape that does not match
// the data length.
func (t Tensor) Float32s() ([]float32, error) {
	switch t.DType {
	case DTypeF32, DTypeF16, DTypeBF16:
	default:
		hint := ""
		if t.DType == DTypeF64 {
			hint = " (narrowing F64 would lose precision: use Float64s)"
		}
		return nil, wrongDType(t, "Float32s", "F32, F16 and BF16", hint)
	}
	n, err := t.elements()
	if err != nil {
		return nil, err
	}
	out := make([]float32, n)
	switch t.DType {
	case DTypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case DTypeF16:
		for i := range out {
			out[i] = f16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	case DTypeBF16:
		for i := range out {
			out[i] = bf16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*i:]))
		}
	}
	return out, nil
}

// Float64s returns the elements of an F64, F32, F16 or BF16 tensor as
// float64; every conversion is exact. Other dtypes are an error.
func (t Tensor) Float64s() ([]float64, error) {
	switch t.DType {
	case DTypeF64, DTypeF32, DTypeF16, DTypeBF16:
	default:
		return nil, wrongDType(t, "Float64s", "F64, F32, F16 and BF16", "")
	}
	n, err := t.elements()
	if err != nil {
		return nil, err
	}
	if t.DType == DTypeF64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
		}
		return out, nil
	}
	f, err := t.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// Int32s returns the elements of an I32, I16, U16, I8 or U8 tensor as int32;
// every conversion is exact. Other dtypes are an error (I64, U32 and U64
// could overflow: use Int64s where it applies).
func (t Tensor) Int32s() ([]int32, error) {
	switch t.DType {
	case DTypeI32, DTypeI16, DTypeU16, DTypeI8, DTypeU8:
	default:
		return nil, wrongDType(t, "Int32s", "I32, I16, U16, I8 and U8", "")
	}
	v, err := t.Int64s()
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out, nil
}

// Int64s returns the elements of an I64, I32, U32, I16, U16, I8 or U8
// tensor as int64; every conversion is exact. Other dtypes (including U64,
// whose values may not fit) are an error.
func (t Tensor) Int64s() ([]int64, error) {
	switch t.DType {
	case DTypeI64, DTypeI32, DTypeU32, DTypeI16, DTypeU16, DTypeI8, DTypeU8:
	default:
		return nil, wrongDType(t, "Int64s", "I64, I32, U32, I16, U16, I8 and U8", "")
	}
	n, err := t.elements()
	if err != nil {
		return nil, err
	}
	out := make([]int64, n)
	d := t.Data
	for i := range out {
		switch t.DType {
		case DTypeI64:
			out[i] = int64(binary.LittleEndian.Uint64(d[8*i:]))
		case DTypeI32:
			out[i] = int64(int32(binary.LittleEndian.Uint32(d[4*i:])))
		case DTypeU32:
			out[i] = int64(binary.LittleEndian.Uint32(d[4*i:]))
		case DTypeI16:
			out[i] = int64(int16(binary.LittleEndian.Uint16(d[2*i:])))
		case DTypeU16:
			out[i] = int64(binary.LittleEndian.Uint16(d[2*i:]))
		case DTypeI8:
			out[i] = int64(int8(d[i]))
		case DTypeU8:
			out[i] = int64(d[i])
		}
	}
	return out, nil
}

// f16ToFloat32 widens an IEEE 754 binary16 value exactly.
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		// Zero or subnormal: mant * 2^-24, exact in float32.
		v := float32(mant) * (1.0 / (1 << 24))
		return math.Float32frombits(math.Float32bits(v) | sign)
	case 0x1f:
		// Infinity or NaN; the payload moves to the top of the float32
		// mantissa.
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// float32ToF16 rounds f to the nearest binary16 value, ties to even.
// Magnitudes that round above the largest half (65504) become infinity;
// NaNs stay NaN (quiet, with the top of the payload kept).
func float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// The result is a half subnormal (or zero, or rounds up to the
		// smallest normal). In units of the smallest subnormal, 2^-24, the
		// value is m * 2^(e-14) with m the 24-bit significand.
		if e < -10 {
			// Below 2^-25, half the smallest subnormal: rounds to zero.
			return sign
		}
		m := mant | 0x800000
		shift := uint(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		halfway := uint32(1) << (shift - 1)
		if rem > halfway || (rem == halfway && q&1 == 1) {
			q++
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // may carry into the exponent, up to infinity: both correct
	}
	return sign | uint16(q)
}

// bf16ToFloat32 widens a bfloat16 value exactly.
func bf16ToFloat32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// float32ToBF16 rounds f to the nearest bfloat16, ties to even; NaNs stay
// NaN (quiet).
func float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
