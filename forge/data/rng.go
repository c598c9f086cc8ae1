package data

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/forgeml/forge/forge"
)

// The Loader's random numbers come from forge.Generator — xoshiro256**
// (Blackman and Vigna) seeded by four steps of SplitMix64 — the generator
// that draws initial weights, so one algorithm serves the whole library.
// Both use only 64-bit integer arithmetic, so a seed gives the same
// numbers on every platform and Go version; TestRNGGolden pins the first
// outputs.

// RNGState is the state of the Loader's xoshiro256** generator. It is
// never all zero. In JSON it is four 16-digit hexadecimal strings, so that
// tools which read numbers as float64 cannot round it.
type RNGState [4]uint64

// newRNG seeds a generator from seed.
func newRNG(seed uint64) RNGState { return RNGState(forge.NewGenerator(seed).State()) }

// next returns the next 64 random bits.
func (s *RNGState) next() uint64 {
	var g forge.Generator
	g.SetState(*s)
	v := g.Uint64()
	*s = g.State()
	return v
}

// below returns a uniform integer in [0, n), n > 0, without bias
// (Lemire's multiply-and-reject, as forge.Generator.Intn).
func (s *RNGState) below(n uint64) uint64 {
	var g forge.Generator
	g.SetState(*s)
	v := g.Intn(int(n))
	*s = g.State()
	return uint64(v)
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
