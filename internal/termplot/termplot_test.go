package termplot

import (
	"math"
	"testing"
	"unicode/utf8"
)

func TestSparkline(t *testing.T) {
	cases := []struct {
		v     []float64
		width int
		want  string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, "▁▂▃▄▅▆▇█"},
		{[]float64{7, 6, 5, 4, 3, 2, 1, 0}, 4, "█▅▃▁"}, // bucket means 6.5 4.5 2.5 0.5
		{[]float64{3, 3, 3}, 10, "▅▅▅"},
		{[]float64{1, math.NaN(), 2}, 3, "▁ █"},
		{nil, 5, ""},
		{[]float64{math.Inf(1)}, 5, ""},
		{[]float64{1, 2}, 0, ""},
	}
	for _, c := range cases {
		if got := Sparkline(c.v, c.width); got != c.want {
			t.Errorf("Sparkline(%v, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
	long := make([]float64, 1000)
	for i := range long {
		long[i] = float64(i)
	}
	if n := utf8.RuneCountInString(Sparkline(long, 40)); n != 40 {
		t.Errorf("1000 points in width 40 gave %d bars", n)
	}
}

func TestKilo(t *testing.T) {
	for v, want := range map[float64]string{950: "950", 12345: "12.3k", 1.25e6: "1.25M"} {
		if got := Kilo(v); got != want {
			t.Errorf("Kilo(%g) = %q, want %q", v, got, want)
		}
	}
}
