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
