// Package termplot draws small text charts for terminals: sparklines of a
// series, for the CLI's training summary and the REPL's live line.
package termplot

import (
	"fmt"
	"math"
	"strings"
)

var bars = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws v in at most width characters, one bar per bucket (the
// bucket's mean), scaled between the series' minimum and maximum.
// Non-finite values are skipped; an empty or all-NaN series gives "".
func Sparkline(v []float64, width int) string {
	if width <= 0 {
		return ""
	}
	var pts []float64
	n := len(v)
	buckets := min(n, width)
	for b := range buckets {
		lo, hi := b*n/buckets, (b+1)*n/buckets
		sum, cnt := 0.0, 0
		for _, x := range v[lo:hi] {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				sum += x
				cnt++
			}
		}
		if cnt > 0 {
			pts = append(pts, sum/float64(cnt))
		} else {
			pts = append(pts, math.NaN())
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range pts {
		if !math.IsNaN(p) {
			lo, hi = min(lo, p), max(hi, p)
		}
	}
	if math.IsInf(lo, 1) {
		return ""
	}
	var sb strings.Builder
	for _, p := range pts {
		switch {
		case math.IsNaN(p):
			sb.WriteRune(' ')
		case hi == lo:
			sb.WriteRune(bars[len(bars)/2])
		default:
			i := int((p - lo) / (hi - lo) * float64(len(bars)-1))
			sb.WriteRune(bars[min(max(i, 0), len(bars)-1)])
		}
	}
	return sb.String()
}

// Kilo formats a rate compactly: 950, 12.3k, 1.25M.
func Kilo(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
