// Package half converts between float32/float64 and the 16-bit float
// formats Forge stores: IEEE 754 binary16 (Float16) and bfloat16 (the top
// 16 bits of a float32). Values of the 16-bit formats are handled as their
// bit patterns (uint16), which is how backends read and write them.
//
// Narrowing (float32 or float64 to 16 bits) rounds the exact value once,
// to nearest with ties to even; values beyond the largest finite number
// after rounding become ±Inf, values below the smallest subnormal round to
// ±0 (or to the smallest subnormal), zeros keep their sign, and a NaN stays
// a NaN: its sign and leading payload bits are kept and the quiet bit is
// set. Widening (16 bits to float32 or float64) is exact and keeps NaN
// payloads.
//
// The package imports nothing of Forge's, so every backend can use it.
package half

import (
	"math"
	"math/bits"
)

// A 16-bit format: its fraction width (the significand has one more bit,
// implicit in normal numbers), the exponent of its smallest normal number
// (the largest finite exponent is 1 − emin) and its field masks.
type format struct {
	fracBits int    // stored fraction bits (p − 1)
	emin     int    // exponent of the smallest normal: 2^emin
	expMask  uint16 // the exponent field in place
	quiet    uint16 // the quiet-NaN bit (top fraction bit)
}

var (
	f16  = format{fracBits: 10, emin: -14, expMask: 0x7c00, quiet: 0x0200}
	bf16 = format{fracBits: 7, emin: -126, expMask: 0x7f80, quiet: 0x0040}
)

// round returns the bits of sign·m·2^e (m < 2⁶⁴, e any) in format f,
// rounded to nearest, ties to even.
func (f format) round(neg bool, m uint64, e int) uint16 {
	var s uint16
	if neg {
		s = 0x8000
	}
	if m == 0 {
		return s
	}
	top := e + bits.Len64(m) - 1 // the value lies in [2^top, 2^(top+1))
	if top > -f.emin+1 {         // at least 2^(emax+1): beyond every finite value
		return s | f.expMask
	}
	// q is the exponent of one unit in the last place of the result: that
	// of the binade of the value, or the subnormal one below emin.
	q := max(top, f.emin) - f.fracBits
	var r uint64 // the significand in units of 2^q
	if sh := q - e; sh <= 0 {
		r = m << -sh // exact; r < 2^(fracBits+1) since q ≥ top − fracBits
	} else if sh > 64 {
		r = 0 // m·2^e < 2^(q−1), below half a unit: rounds to zero
	} else {
		var rest, half uint64
		if sh == 64 {
			r, rest, half = 0, m, 1<<63
		} else {
			r, rest, half = m>>sh, m&(1<<sh-1), 1<<(sh-1)
		}
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
	}
	// With the biased exponent field counting from the subnormal binade,
	// (q − qmin)·2^fracBits + r is the encoding; a carry out of the
	// significand moves into the exponent field on its own.
	qmin := f.emin - f.fracBits
	enc := uint64(q-qmin)<<f.fracBits + r
	if enc >= uint64(f.expMask) {
		return s | f.expMask
	}
	return s | uint16(enc)
}

// fromFloat64 narrows x to format f.
func (f format) fromFloat64(x float64) uint16 {
	b := math.Float64bits(x)
	neg := b>>63 != 0
	exp := int(b>>52) & 0x7ff
	frac := b & (1<<52 - 1)
	switch {
	case exp == 0x7ff && frac != 0:
		return f.nan(neg, frac>>(52-f.fracBits))
	case exp == 0x7ff:
		if neg {
			return 0x8000 | f.expMask
		}
		return f.expMask
	case exp == 0:
		return f.round(neg, frac, -1074)
	}
	return f.round(neg, frac|1<<52, exp-1075)
}

// fromFloat32 narrows x to format f.
func (f format) fromFloat32(x float32) uint16 {
	b := math.Float32bits(x)
	neg := b>>31 != 0
	exp := int(b>>23) & 0xff
	frac := b & (1<<23 - 1)
	switch {
	case exp == 0xff && frac != 0:
		return f.nan(neg, uint64(frac>>(23-f.fracBits)))
	case exp == 0xff:
		if neg {
			return 0x8000 | f.expMask
		}
		return f.expMask
	case exp == 0:
		return f.round(neg, uint64(frac), -149)
	}
	return f.round(neg, uint64(frac|1<<23), exp-150)
}

// nan returns a quiet NaN with the given sign and leading payload bits.
func (f format) nan(neg bool, payload uint64) uint16 {
	h := f.expMask | f.quiet | uint16(payload)&(f.quiet<<1-1)
	if neg {
		h |= 0x8000
	}
	return h
}

// Float16Bits returns the binary16 bits of x rounded to nearest, ties to
// even.
func Float16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	// Fast path: results that are normal binary16 numbers (|x| in
	// [2^-14, 65520), 65520 being the midpoint between the largest finite
	// value 65504 and 2^16, where rounding overflows to Inf), rounded on
	// the bits directly.
	if a := b & 0x7fffffff; a >= 0x38800000 && a < 0x477ff000 {
		// Rebias the exponent (127 → 15) and drop 13 fraction bits,
		// rounding to nearest even; a carry reaches the exponent.
		r := a - (112 << 23) // 127 − 15 = 112
		h := r >> 13
		rest := r & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
			h++
		}
		return uint16(b>>16)&0x8000 | uint16(h)
	}
	return f16.fromFloat32(x)
}

// Float16BitsFrom64 returns the binary16 bits of x rounded once to
// nearest, ties to even (no intermediate float32 rounding).
func Float16BitsFrom64(x float64) uint16 { return f16.fromFloat64(x) }

// Float16FromBits returns the float32 value of the binary16 bits h
// (exact).
func Float16FromBits(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h & 0x3ff)
	switch exp {
	case 0x1f: // Inf or NaN: the payload moves up unchanged
		return math.Float32frombits(sign | 0x7f800000 | frac<<13)
	case 0:
		if frac == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: frac·2^-24, exact in float32.
		v := float32(frac) * (1.0 / (1 << 24))
		return math.Float32frombits(sign | math.Float32bits(v))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// BFloat16Bits returns the bfloat16 bits of x rounded to nearest, ties to
// even.
func BFloat16Bits(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 {
		if b&0x7fffff != 0 {
			return bf16.nan(b>>31 != 0, uint64(b>>16))
		}
		return uint16(b >> 16) // ±Inf
	}
	// Same exponent range as float32: keep the top half and round on the
	// dropped half; a carry moves into the exponent (up to Inf).
	h := b >> 16
	rest := b & 0xffff
	if rest > 0x8000 || (rest == 0x8000 && h&1 == 1) {
		h++
	}
	return uint16(h)
}

// BFloat16BitsFrom64 returns the bfloat16 bits of x rounded once to
// nearest, ties to even (no intermediate float32 rounding).
func BFloat16BitsFrom64(x float64) uint16 { return bf16.fromFloat64(x) }

// BFloat16FromBits returns the float32 value of the bfloat16 bits h
// (exact).
func BFloat16FromBits(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// EncodeFloat16 sets dst[i] to the binary16 bits of src[i] for i below
// min(len(dst), len(src)) and returns that count.
func EncodeFloat16(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	for i, x := range src[:n] {
		dst[i] = Float16Bits(x)
	}
	return n
}

// DecodeFloat16 sets dst[i] to the value of the binary16 bits src[i] for i
// below min(len(dst), len(src)) and returns that count.
func DecodeFloat16(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	for i, h := range src[:n] {
		dst[i] = Float16FromBits(h)
	}
	return n
}

// EncodeBFloat16 sets dst[i] to the bfloat16 bits of src[i] for i below
// min(len(dst), len(src)) and returns that count.
func EncodeBFloat16(dst []uint16, src []float32) int {
	n := min(len(dst), len(src))
	for i, x := range src[:n] {
		dst[i] = BFloat16Bits(x)
	}
	return n
}

// DecodeBFloat16 sets dst[i] to the value of the bfloat16 bits src[i] for
// i below min(len(dst), len(src)) and returns that count.
func DecodeBFloat16(dst []float32, src []uint16) int {
	n := min(len(dst), len(src))
	for i, h := range src[:n] {
		dst[i] = BFloat16FromBits(h)
	}
	return n
}

// Float16s returns the binary16 bits of every value of src.
func Float16s(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	EncodeFloat16(dst, src)
	return dst
}

// BFloat16s returns the bfloat16 bits of every value of src.
func BFloat16s(src []float32) []uint16 {
	dst := make([]uint16, len(src))
	EncodeBFloat16(dst, src)
	return dst
}
