package main

import (
	"image"
	"image/color"
	"image/draw"
	"math"
)

// Pixel classification. The page background is white; inside a plot area
// echarts draws light grey split lines (#E0E6F1 by default: channel spread
// 17, luma 229). A pixel is ink — part of a series line, a bar, a scatter
// symbol, a heatmap cell — when it is clearly coloured (channel spread at
// least minSpread) or clearly dark (luma below maxLuma). Anti-aliased edges
// of grid lines stay below both limits.
const (
	minSpread = 40
	maxLuma   = 100
)

// isInk reports whether an 8-bit RGB pixel differs clearly from the white
// background and the light grey grid lines.
func isInk(r, g, b uint8) bool {
	hi := max(r, g, b)
	lo := min(r, g, b)
	if int(hi)-int(lo) >= minSpread {
		return true
	}
	luma := (299*int(r) + 587*int(g) + 114*int(b)) / 1000
	return luma < maxLuma
}

// countInk counts the ink pixels of img inside rect (clipped to the image)
// and returns them with the number of pixels looked at.
func countInk(img image.Image, rect image.Rectangle) (ink, total int) {
	rect = rect.Intersect(img.Bounds())
	switch m := img.(type) {
	case *image.NRGBA: // what image/png returns for an opaque RGBA screenshot
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			i := m.PixOffset(rect.Min.X, y)
			for x := rect.Min.X; x < rect.Max.X; x, i = x+1, i+4 {
				if isInk(m.Pix[i], m.Pix[i+1], m.Pix[i+2]) {
					ink++
				}
			}
		}
	case *image.RGBA:
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			i := m.PixOffset(rect.Min.X, y)
			for x := rect.Min.X; x < rect.Max.X; x, i = x+1, i+4 {
				if isInk(m.Pix[i], m.Pix[i+1], m.Pix[i+2]) {
					ink++
				}
			}
		}
	default:
		for y := rect.Min.Y; y < rect.Max.Y; y++ {
			for x := rect.Min.X; x < rect.Max.X; x++ {
				r, g, b, _ := m.At(x, y).RGBA()
				if isInk(uint8(r>>8), uint8(g>>8), uint8(b>>8)) {
					ink++
				}
			}
		}
	}
	return ink, rect.Dx() * rect.Dy()
}

// plotRect is the pixel rectangle of a chart's measured area: the pixels
// lying entirely inside the reported rectangle.
func plotRect(c chartReport) image.Rectangle {
	return image.Rect(int(math.Ceil(c.X)), int(math.Ceil(c.Y)), int(math.Floor(c.X+c.W)), int(math.Floor(c.Y+c.H)))
}

// measurement is one chart's result.
type measurement struct {
	Chart    chartReport
	Rect     image.Rectangle
	Ink      int
	Pixels   int
	Fraction float64 // Ink / Pixels, 0 when the area is empty
	Clipped  bool    // part of the area lies outside the screenshot
}

// measure counts the ink of every chart of a report in a screenshot.
func measure(img image.Image, rep pageReport) []measurement {
	ms := make([]measurement, 0, len(rep.Charts))
	for _, c := range rep.Charts {
		r := plotRect(c)
		ink, total := countInk(img, r)
		m := measurement{Chart: c, Rect: r, Ink: ink, Pixels: total, Clipped: !r.In(img.Bounds())}
		if total > 0 {
			m.Fraction = float64(ink) / float64(total)
		}
		ms = append(ms, m)
	}
	return ms
}

// outlined is a copy of img with each measured area framed just outside
// it, green where the chart passed and red where it failed (-outline).
func outlined(img image.Image, ms []measurement, threshold float64) *image.RGBA {
	out := image.NewRGBA(img.Bounds())
	draw.Draw(out, out.Bounds(), img, img.Bounds().Min, draw.Src)
	for _, m := range ms {
		c := color.RGBA{0, 160, 0, 255}
		if m.Fraction < threshold {
			c = color.RGBA{220, 0, 0, 255}
		}
		r := m.Rect.Inset(-1)
		for x := r.Min.X; x < r.Max.X; x++ {
			out.Set(x, r.Min.Y, c)
			out.Set(x, r.Max.Y-1, c)
		}
		for y := r.Min.Y; y < r.Max.Y; y++ {
			out.Set(r.Min.X, y, c)
			out.Set(r.Max.X-1, y, c)
		}
	}
	return out
}
