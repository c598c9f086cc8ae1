package data

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
)

// The Loader's random numbers come from xoshiro256** (Blackman and Vigna),
// a 256-bit-state generator, whose state is filled from the seed by four
// steps of SplitMix64, the seeding its authors recommend. Both use only
// 64-bit integer arithmetic, so a seed gives the same numbers on every
// platform and Go version; TestRNGGolden pins the first outputs.

// splitmix64 advances *x and returns the next SplitMix64 output.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// RNGState is the state of the Loader's xoshiro256** generator. It is
// never all zero. In JSON it is four 16-digit hexadecimal strings, so that
// tools which read numbers as float64 cannot round it.
type RNGState [4]uint64

// newRNG seeds a generator from seed.
func newRNG(seed uint64) RNGState {
	var s RNGState
	x := seed
	for i := range s {
		s[i] = splitmix64(&x)
	}
	// SplitMix64 is a bijection of its counter, so at most one of four
	// consecutive outputs is zero: the state cannot be all zero.
	return s
}

// next returns the next 64 random bits.
func (s *RNGState) next() uint64 {
	out := bits.RotateLeft64(s[1]*5, 7) * 9
	t := s[1] << 17
	s[2] ^= s[0]
	s[3] ^= s[1]
	s[1] ^= s[2]
	s[0] ^= s[3]
	s[2] ^= t
	s[3] = bits.RotateLeft64(s[3], 45)
	return out
}

// below returns a uniform integer in [0, n), n > 0, without modulo bias:
// the high word of a 64×64-bit product, redrawing the rare products whose
// low word falls under 2⁶⁴ mod n (Lemire's method).
func (s *RNGState) below(n uint64) uint64 {
	hi, lo := bits.Mul64(s.next(), n)
	if lo < n {
		threshold := -n % n
		for lo < threshold {
			hi, lo = bits.Mul64(s.next(), n)
		}
	}
	return hi
}

func (s RNGState) zero() bool { return s == RNGState{} }

// MarshalJSON writes the four words as hexadecimal strings.
func (s RNGState) MarshalJSON() ([]byte, error) {
	var words [4]string
	for i, w := range s {
		words[i] = fmt.Sprintf("%016x", w)
	}
	return json.Marshal(words)
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (s *RNGState) UnmarshalJSON(b []byte) error {
	var words []string
	if err := json.Unmarshal(b, &words); err != nil || len(words) != 4 {
		return fmt.Errorf("data: loader rng state: want an array of four hexadecimal strings, got %.80s", b)
	}
	var t RNGState
	for i, w := range words {
		v, err := strconv.ParseUint(w, 16, 64)
		if err != nil {
			return fmt.Errorf("data: loader rng state word %d: %w", i, err)
		}
		t[i] = v
	}
	*s = t
	return nil
}
