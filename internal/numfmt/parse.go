package numfmt

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// ParseBytes reads a positive size: a number of bytes with an optional
// unit, KiB, MiB, GiB, TiB (or K, M, G, T for the same powers of 1024),
// KB, MB, GB, TB (powers of 1000) or B. Spaces before the unit are
// allowed.
func ParseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	s = strings.TrimSpace(s)
	num, mult := s, 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) || f*mult > 1<<62 {
		return 0, errors.New("want a size such as 64MB, 512MiB or 2G")
	}
	return int64(f * mult), nil
}
