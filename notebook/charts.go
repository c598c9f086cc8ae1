package notebook

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
)

// Series is one line of a line chart.
type Series struct {
	Name string
	X, Y []float64
}

// LineOption builds the echarts option (JSON) of a line chart with a
// numeric x axis, through go-echarts. Series are downsampled to MaxPoints
// and their non-finite values become gaps.
func LineOption(title, xName, yName string, logY bool, series ...Series) string {
	line := charts.NewLine()
	yType := "value"
	if logY {
		yType = "log"
	}
	line.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Left: "center", TitleStyle: &opts.TextStyle{FontSize: 13}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(len(series) > 1), Top: "22"}),
		charts.WithGridOpts(opts.Grid{Left: "60", Right: "24", Top: "50", Bottom: "40"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: xName, NameLocation: "middle", NameGap: 25, Scale: opts.Bool(true)}),
		charts.WithYAxisOpts(opts.YAxis{Type: yType, Name: yName, Scale: opts.Bool(true)}),
		charts.WithAnimation(false),
	)
	for _, s := range series {
		ps := pairs(s.X, s.Y)
		data := make([]opts.LineData, len(ps))
		for i, p := range ps {
			data[i] = opts.LineData{Value: []any{p[0], p[1]}}
		}
		line.AddSeries(s.Name, data, charts.WithLineChartOpts(opts.LineChart{
			ShowSymbol: opts.Bool(len(ps) < 40), ConnectNulls: opts.Bool(false),
		}))
	}
	return line.RenderSnippet().Option
}

// BarOption builds a horizontal bar chart (categories top to bottom).
func BarOption(title, valueName string, labels []string, values []float64) string {
	bar := charts.NewBar()
	rev := make([]string, len(labels))
	data := make([]opts.BarData, len(values))
	for i := range labels {
		rev[len(labels)-1-i] = labels[i]
	}
	for i, v := range values {
		data[len(values)-1-i] = opts.BarData{Value: Value(v)}
	}
	bar.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Left: "center", TitleStyle: &opts.TextStyle{FontSize: 13}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}), // one series: the axis names it
		charts.WithGridOpts(opts.Grid{Left: "8", Right: "40", Top: "40", Bottom: "30", ContainLabel: opts.Bool(true)}),
		charts.WithXAxisOpts(opts.XAxis{Type: "value", Name: valueName, NameLocation: "middle", NameGap: 22}),
		charts.WithYAxisOpts(opts.YAxis{Type: "category", Data: rev, AxisLabel: &opts.AxisLabel{Width: 220, Overflow: "truncate"}}),
		charts.WithAnimation(false),
	)
	bar.AddSeries(valueName, data)
	return bar.RenderSnippet().Option
}

// HistogramOption builds a histogram of values in bins bins (non-finite
// values are left out; the title says how many).
func HistogramOption(title string, values []float64, bins int) string {
	if bins <= 0 {
		bins = 50
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	bad := 0
	for _, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			bad++
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	counts := make([]float64, bins)
	labels := make([]string, bins)
	if lo <= hi {
		w := (hi - lo) / float64(bins)
		if w == 0 {
			w = 1
		}
		for _, v := range values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			counts[min(int((v-lo)/w), bins-1)]++
		}
		tick := tickFormat(lo, hi, w)
		for i := range labels {
			labels[i] = tick(lo + (float64(i)+0.5)*w)
		}
	}
	if bad > 0 {
		title += fmt.Sprintf(" (%d non-finite left out)", bad)
	}
	bar := charts.NewBar()
	bar.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Left: "center", TitleStyle: &opts.TextStyle{FontSize: 13}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "axis"}),
		// One series, named by the y axis: a legend would sit on the title.
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}),
		charts.WithGridOpts(opts.Grid{Left: "50", Right: "20", Top: "40", Bottom: "40"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "category", Name: "value", NameLocation: "middle", NameGap: 25}),
		charts.WithYAxisOpts(opts.YAxis{Type: "value", Name: "count"}),
		charts.WithAnimation(false),
	)
	bar.SetXAxis(labels)
	data := make([]opts.BarData, bins)
	for i, c := range counts {
		data[i] = opts.BarData{Value: c}
	}
	bar.AddSeries("count", data, charts.WithBarChartOpts(opts.BarChart{BarCategoryGap: "0%"}))
	return bar.RenderSnippet().Option
}

// tickFormat returns one format for every tick label of an axis from lo
// to hi in steps of w: fixed-point with as many decimals as the step
// needs, or, for very small or very large magnitudes, scientific notation
// with a common number of digits — never a mix of the two (%g's
// "9.7e-05" beside "0.000155").
func tickFormat(lo, hi, w float64) func(float64) string {
	mag := math.Max(math.Abs(lo), math.Abs(hi))
	if w <= 0 || math.IsNaN(w) || math.IsInf(w, 0) {
		w = math.Max(mag, 1)
	}
	if mag != 0 && (mag < 1e-3 || mag >= 1e6) {
		// digits after the point of the mantissa: enough to tell steps apart
		d := int(math.Max(0, math.Min(6, math.Ceil(math.Log10(mag/w)))))
		return func(v float64) string { return strconv.FormatFloat(v, 'e', d, 64) }
	}
	d := int(math.Max(0, math.Min(8, math.Ceil(-math.Log10(w))+1)))
	return func(v float64) string {
		s := strconv.FormatFloat(v, 'f', d, 64)
		if s == "-"+strconv.FormatFloat(0, 'f', d, 64) {
			s = s[1:] // no "-0.00"
		}
		return s
	}
}

// maxHeatmapSide is the most rows or columns a heatmap draws; larger
// matrices are averaged over blocks.
const maxHeatmapSide = 128

// round4 rounds v to 4 significant digits: a heatmap cell's colour cannot
// show more, and the shorter numbers keep a 128×128 map's HTML small.
func round4(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// HeatmapOption builds a heatmap of a rows×cols matrix (row-major values).
// Larger matrices are reduced by block means to at most 128×128 cells;
// non-finite cells are drawn empty.
func HeatmapOption(title string, rows, cols int, values []float64) string {
	rs, cs := min(rows, maxHeatmapSide), min(cols, maxHeatmapSide)
	cells := make([]float64, rs*cs)
	counts := make([]int, rs*cs)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			v := values[r*cols+c]
			k := (r*rs/rows)*cs + c*cs/cols
			if math.IsNaN(v) || math.IsInf(v, 0) {
				cells[k] = math.NaN()
			}
			cells[k] += v
			counts[k]++
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	data := make([][]any, 0, rs*cs)
	for r := 0; r < rs; r++ {
		for c := 0; c < cs; c++ {
			v := cells[r*cs+c] / float64(max(counts[r*cs+c], 1))
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			// y index 0 at the top: rows read downwards like the matrix.
			data = append(data, []any{c, r, Value(round4(v))})
		}
	}
	if lo > hi {
		lo, hi = 0, 1
	}
	xs := make([]string, cs)
	ys := make([]string, rs)
	for c := range xs {
		xs[c] = fmt.Sprint(c * cols / cs)
	}
	for r := range ys {
		ys[r] = fmt.Sprint(r * rows / rs)
	}
	if rs < rows || cs < cols {
		title += fmt.Sprintf(" (block means, %d×%d cells)", rs, cs)
	}
	hm := charts.NewHeatMap()
	hm.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Left: "center", TitleStyle: &opts.TextStyle{FontSize: 13}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true)}),
		// The colour scale (visualMap) is the legend; go-echarts' default
		// legend would repeat the series name on top of the title.
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}),
		charts.WithGridOpts(opts.Grid{Left: "50", Right: "90", Top: "40", Bottom: "30"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "category", Data: xs, Name: "col"}),
		charts.WithYAxisOpts(opts.YAxis{Type: "category", Data: ys, Name: "row", Inverse: opts.Bool(true)}),
		charts.WithVisualMapOpts(opts.VisualMap{Calculable: opts.Bool(true), Min: float32(lo), Max: float32(hi), Right: "0", Top: "middle",
			InRange: &opts.VisualMapInRange{Color: []string{"#313695", "#74add1", "#ffffbf", "#f46d43", "#a50026"}}}),
		charts.WithAnimation(false),
	)
	hm.SetXAxis(xs)
	hm.AddSeries("value", nil)
	return withSeriesData(hm.RenderSnippet().Option, data)
}

// withSeriesData puts rows as the first series' data in option, written
// as bare [x, y, value] arrays: go-echarts wraps each in {"value": …},
// which for a 128×128 heatmap is a third of the page.
func withSeriesData(option string, rows [][]any) string {
	var o map[string]any
	if err := json.Unmarshal([]byte(option), &o); err != nil {
		return option
	}
	series, _ := o["series"].([]any)
	if len(series) == 0 {
		return option
	}
	first, _ := series[0].(map[string]any)
	if first == nil {
		return option
	}
	first["data"] = rows
	b, err := json.Marshal(o)
	if err != nil {
		return option
	}
	return string(b)
}

// RooflinePoint is one kernel on a roofline chart.
type RooflinePoint struct {
	Label     string
	Intensity float64 // FLOPs per byte
	GFLOPS    float64 // achieved
	Share     float64 // of the kernel time: sets the marker size
}

// RooflineOption builds a log-log roofline: the attainable rate
// min(peakGFLOPS, intensity × peakGBps) as a line, and each kernel as a
// point at its arithmetic intensity and achieved GFLOP/s, sized by its
// share of the time. Points without FLOPs or bytes have no place on a
// log axis and are left out (the caller says how many).
func RooflineOption(title string, peakGFLOPS, peakGBps float64, points []RooflinePoint) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	var pts []RooflinePoint
	for _, p := range points {
		if p.Intensity > 0 && p.GFLOPS > 0 && !math.IsInf(p.Intensity, 0) && !math.IsNaN(p.GFLOPS) {
			pts = append(pts, p)
			lo, hi = math.Min(lo, p.Intensity), math.Max(hi, p.Intensity)
		}
	}
	ridge := peakGFLOPS / peakGBps
	lo, hi = math.Min(lo, ridge), math.Max(hi, ridge)
	if math.IsInf(lo, 0) || !(ridge > 0) {
		lo, hi = 0.1, 100
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))

	sc := charts.NewScatter()
	sc.SetGlobalOptions(
		charts.WithTitleOpts(opts.Title{Title: title, Left: "center", TitleStyle: &opts.TextStyle{FontSize: 13}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Top: "22"}),
		charts.WithGridOpts(opts.Grid{Left: "60", Right: "30", Top: "50", Bottom: "45"}),
		charts.WithXAxisOpts(opts.XAxis{Type: "log", Name: "FLOP per byte", NameLocation: "middle", NameGap: 25, Min: lo, Max: hi}),
		charts.WithYAxisOpts(opts.YAxis{Type: "log", Name: "GFLOP/s"}),
		charts.WithAnimation(false),
	)
	data := make([]opts.ScatterData, len(pts))
	for i, p := range pts {
		data[i] = opts.ScatterData{Name: p.Label, Value: []any{p.Intensity, p.GFLOPS},
			SymbolSize: int(math.Round(6 + 30*math.Sqrt(math.Max(p.Share, 0))))}
	}
	sc.AddSeries("kernels", data)

	// The roof: a slope up to the ridge point, flat after it.
	roof := charts.NewLine()
	xs := []float64{lo, ridge, hi}
	rd := make([]opts.LineData, 0, 3)
	for _, x := range xs {
		if x >= lo && x <= hi {
			rd = append(rd, opts.LineData{Value: []any{x, math.Min(peakGFLOPS, x*peakGBps)}})
		}
	}
	roof.AddSeries(fmt.Sprintf("roof (%.0f GFLOP/s, %.0f GB/s)", peakGFLOPS, peakGBps), rd,
		charts.WithLineChartOpts(opts.LineChart{ShowSymbol: opts.Bool(false)}),
		charts.WithLineStyleOpts(opts.LineStyle{Color: "#868e96", Type: "dashed", Width: 2}))
	sc.Overlap(roof)
	return sc.RenderSnippet().Option
}
