// Package numfmt holds the number formatting the front ends and reports
// share.
package numfmt

import (
	"fmt"
	"slices"
	"strings"
)

// Thousands formats n with comma separators: 1234567 → "1,234,567".
func Thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var parts []string
	for len(s) > 3 {
		parts = append(parts, s[len(s)-3:])
		s = s[:len(s)-3]
	}
	parts = append(parts, s)
	slices.Reverse(parts)
	out := strings.Join(parts, ",")
	if neg {
		out = "-" + out
	}
	return out
}

// Bytes formats a byte count in binary units: 512 → "512 B", 1536 →
// "1.5 KiB", on to EiB; a float64, so that estimates beyond int64 print.
func Bytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
