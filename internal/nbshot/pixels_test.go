package main

import (
	"image"
	"image/color"
	"strings"
	"testing"
)

func TestIsInk(t *testing.T) {
	for _, c := range []struct {
		name    string
		r, g, b uint8
		ink     bool
	}{
		{"white background", 255, 255, 255, false},
		{"near white", 246, 248, 250, false},
		{"split line #E0E6F1", 0xE0, 0xE6, 0xF1, false},
		{"anti-aliased split line", 0xEE, 0xF2, 0xF8, false},
		{"axis line #6E7079", 0x6E, 0x70, 0x79, false},
		{"roofline roof #868E96", 0x86, 0x8E, 0x96, false},
		{"echarts blue #5470C6", 0x54, 0x70, 0xC6, true},
		{"echarts green #91CC75", 0x91, 0xCC, 0x75, true},
		{"heatmap middle #FFFFBF", 0xFF, 0xFF, 0xBF, true},
		{"heatmap low #313695", 0x31, 0x36, 0x95, true},
		{"text #333", 0x33, 0x33, 0x33, true},
		{"black", 0, 0, 0, true},
	} {
		if got := isInk(c.r, c.g, c.b); got != c.ink {
			t.Errorf("isInk(%s) = %v, want %v", c.name, got, c.ink)
		}
	}
}

// chartImage draws a synthetic plot area: white, light grey split lines
// every 10 rows, a mid-grey axis line through the middle, and, with
// drawn, a blue 2 px line along the diagonal and a 10×10 green bar.
// It returns the image and the number of ink pixels inside plot.
func chartImage(drawn bool) (img *image.RGBA, plot image.Rectangle, ink int) {
	img = image.NewRGBA(image.Rect(0, 0, 200, 120))
	plot = image.Rect(20, 10, 180, 110) // 160×100
	for y := 0; y < 120; y++ {
		for x := 0; x < 200; x++ {
			img.Set(x, y, color.White)
		}
	}
	for y := plot.Min.Y; y < plot.Max.Y; y += 10 {
		for x := plot.Min.X; x < plot.Max.X; x++ {
			img.Set(x, y, color.RGBA{0xE0, 0xE6, 0xF1, 255})
		}
	}
	for x := plot.Min.X; x < plot.Max.X; x++ {
		img.Set(x, 60, color.RGBA{0x6E, 0x70, 0x79, 255})
	}
	// Ink outside the plot area (a title, axis labels) must not count.
	for x := 0; x < 200; x++ {
		img.Set(x, 2, color.Black)
	}
	if !drawn {
		return img, plot, 0
	}
	set := map[image.Point]bool{}
	for x := plot.Min.X; x < plot.Max.X; x++ {
		y := plot.Min.Y + (x-plot.Min.X)*100/160
		for _, p := range []image.Point{{x, y}, {x, y + 1}} {
			if p.In(plot) {
				set[p] = true
				img.Set(p.X, p.Y, color.RGBA{0x54, 0x70, 0xC6, 255})
			}
		}
	}
	for y := 90; y < 100; y++ {
		for x := 150; x < 160; x++ {
			set[image.Pt(x, y)] = true
			img.Set(x, y, color.RGBA{0x91, 0xCC, 0x75, 255})
		}
	}
	return img, plot, len(set)
}

func TestCountInk(t *testing.T) {
	img, plot, want := chartImage(true)
	ink, total := countInk(img, plot)
	if ink != want || total != 160*100 {
		t.Errorf("drawn: countInk = %d of %d, want %d of %d", ink, total, want, 160*100)
	}
	blank, _, _ := chartImage(false)
	if ink, total := countInk(blank, plot); ink != 0 || total != 16000 {
		t.Errorf("blank (split lines, axis line): countInk = %d of %d, want 0 of 16000", ink, total)
	}
	// The same counts through the NRGBA fast path (what image/png returns)
	// and the generic one.
	nrgba := image.NewNRGBA(img.Bounds())
	gray16 := image.NewRGBA64(img.Bounds())
	for y := 0; y < 120; y++ {
		for x := 0; x < 200; x++ {
			nrgba.Set(x, y, img.At(x, y))
			gray16.Set(x, y, img.At(x, y))
		}
	}
	for name, m := range map[string]image.Image{"NRGBA": nrgba, "RGBA64": gray16} {
		if ink, total := countInk(m, plot); ink != want || total != 16000 {
			t.Errorf("%s: countInk = %d of %d, want %d of 16000", name, ink, total, want)
		}
	}
	// A rectangle reaching outside the image is clipped to it.
	if ink, total := countInk(img, image.Rect(-50, -50, 1000, 1000)); total != 200*120 || ink != want+200 {
		t.Errorf("clipped: countInk = %d of %d, want %d of %d", ink, total, want+200, 200*120)
	}
	if ink, total := countInk(img, image.Rect(300, 300, 400, 400)); ink != 0 || total != 0 {
		t.Errorf("outside: countInk = %d of %d, want 0 of 0", ink, total)
	}
}

func TestPlotRect(t *testing.T) {
	got := plotRect(chartReport{X: 83, Y: 158.39, W: 870, H: 204.5})
	if want := image.Rect(83, 159, 953, 362); got != want {
		t.Errorf("plotRect = %v, want %v (whole pixels inside)", got, want)
	}
}

func TestMeasure(t *testing.T) {
	drawn, plot, want := chartImage(true)
	rep := pageReport{Charts: []chartReport{
		{ID: "a", X: float64(plot.Min.X), Y: float64(plot.Min.Y), W: float64(plot.Dx()), H: float64(plot.Dy())},
		{ID: "empty-area", X: 10, Y: 10, W: 0.5, H: 50},
	}}
	ms := measure(drawn, rep)
	if len(ms) != 2 {
		t.Fatalf("%d measurements", len(ms))
	}
	if ms[0].Ink != want || ms[0].Pixels != 16000 || ms[0].Fraction != float64(want)/16000 {
		t.Errorf("chart a: %+v, want %d of 16000", ms[0], want)
	}
	if ms[1].Pixels != 0 || ms[1].Fraction != 0 {
		t.Errorf("an area without whole pixels: %+v, want fraction 0", ms[1])
	}
	if ms[0].Clipped || ms[1].Clipped {
		t.Errorf("areas inside the image marked clipped")
	}
	out := measure(drawn, pageReport{Charts: []chartReport{{ID: "wide", X: 150, Y: 10, W: 100, H: 20}}})
	if !out[0].Clipped || out[0].Pixels != 50*20 {
		t.Errorf("an area reaching past the right edge: %+v, want clipped, 1000 pixels counted", out[0])
	}
	if f := ms[0].Fraction; f < defaultMinFraction {
		t.Errorf("the synthetic drawn chart (%.4f) is below the threshold %.4f", f, defaultMinFraction)
	}
}

func TestJudgeControl(t *testing.T) {
	m := func(id string, f float64) measurement { return measurement{Chart: chartReport{ID: id}, Fraction: f} }
	const th = 0.002
	if p := judgeControl([]measurement{m(controlDrawn, 0.0126), m(controlEmpty, 0), m(controlUndrawn, 0)}, th); len(p) != 0 {
		t.Errorf("a good control: %v", p)
	}
	cases := map[string][]measurement{
		"control-drawn fails":            {m(controlDrawn, 0.001), m(controlEmpty, 0), m(controlUndrawn, 0)},
		"control-empty-series passes":    {m(controlDrawn, 0.0126), m(controlEmpty, 0.005), m(controlUndrawn, 0)},
		"control-never-drawn passes":     {m(controlDrawn, 0.0126), m(controlEmpty, 0), m(controlUndrawn, 0.3)},
		"control-never-drawn is missing": {m(controlDrawn, 0.0126), m(controlEmpty, 0)},
		`unexpected chart "x"`:           {m(controlDrawn, 0.0126), m(controlEmpty, 0), m(controlUndrawn, 0), m("x", 0)},
	}
	for want, ms := range cases {
		p := judgeControl(ms, th)
		if len(p) != 1 || !strings.Contains(p[0], want) {
			t.Errorf("judgeControl: %q, want one problem saying %q", p, want)
		}
	}
}

func TestOutlined(t *testing.T) {
	img, plot, _ := chartImage(true)
	ms := []measurement{{Rect: plot, Fraction: 0.5}, {Rect: image.Rect(5, 5, 15, 15), Fraction: 0}}
	out := outlined(img, ms, 0.002)
	if c := out.RGBAAt(plot.Min.X-1, plot.Min.Y+5); c != (color.RGBA{0, 160, 0, 255}) {
		t.Errorf("frame of a passing chart is %v, want green", c)
	}
	if c := out.RGBAAt(4, 8); c != (color.RGBA{220, 0, 0, 255}) {
		t.Errorf("frame of a failing chart is %v, want red", c)
	}
	if c := out.RGBAAt(100, 80); c != img.RGBAAt(100, 80) {
		t.Errorf("inside the area the picture changed: %v → %v", img.RGBAAt(100, 80), c)
	}
}
