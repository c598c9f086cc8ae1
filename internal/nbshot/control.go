package main

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"strings"
)

// The negative control: a page built and measured exactly like a
// notebook's, holding one chart with data, one chart with axes but an
// empty series, and one chart div that no script ever draws. Unless the
// measurement passes the first and fails the other two, the check could
// not fail on this machine and proves nothing.
const (
	controlDrawn   = "control-drawn"
	controlEmpty   = "control-empty-series"
	controlUndrawn = "control-never-drawn"
)

// controlExpect says which control charts must pass.
var controlExpect = map[string]bool{controlDrawn: true, controlEmpty: false, controlUndrawn: false}

// controlOption is a line chart option styled like the notebook's loss
// charts (one thin line, no symbols, split lines, animation on so the
// settle time is exercised); with data it plots a falling, noisy curve.
//
// Without data the y axis runs from -1 to 1, so that the x axis line (a
// mid grey, #6E7079) crosses the middle of the plot area, between split
// lines: a blank chart the measurement must not mistake for a drawn one.
func controlOption(title string, withData bool) string {
	data := [][2]float64{}
	if withData {
		for i := 0; i < 300; i++ {
			x := float64(i + 1)
			y := 2 + 4*math.Exp(-x/60) + 0.15*math.Sin(x*0.7)*math.Exp(-x/200)
			data = append(data, [2]float64{x, math.Round(y*1e4) / 1e4})
		}
	}
	yAxis := map[string]any{"type": "value", "name": "loss", "scale": true}
	if !withData {
		yAxis["min"], yAxis["max"] = -1, 1
	}
	opt := map[string]any{
		"title":   map[string]any{"text": title, "left": "center", "textStyle": map[string]any{"fontSize": 13}},
		"grid":    []any{map[string]any{"left": "60", "top": "50", "right": "24", "bottom": "40"}},
		"xAxis":   []any{map[string]any{"type": "value", "name": "step", "nameLocation": "middle", "nameGap": 25, "scale": true}},
		"yAxis":   []any{yAxis},
		"tooltip": map[string]any{"show": true, "trigger": "axis"},
		"series":  []any{map[string]any{"name": "loss", "type": "line", "showSymbol": false, "data": data}},
	}
	b, err := json.Marshal(opt)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// controlChart is a chart fragment shaped like notebook.ChartHTML's: a div
// with a text placeholder and a script that waits for window.echarts.
// With draw false the script is left out.
func controlChart(id, option string, height int, draw bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<div id=\"%s\" class=\"forge-chart\" style=\"width:100%%;max-width:960px;height:%dpx\">", html.EscapeString(id), height)
	fmt.Fprintf(&b, "<pre class=\"forge-chart-placeholder\" style=\"margin:0;padding:8px;color:#666;font-size:12px\">%s: the text a reader sees where scripts do not run</pre></div>\n", html.EscapeString(id))
	if !draw {
		return b.String()
	}
	fmt.Fprintf(&b, `<script>
(function(){
var id = %q, option = %s, tries = 0;
function draw() {
  var el = document.getElementById(id);
  if (!window.echarts || !el) { if (tries++ < 400) { setTimeout(draw, 25); } return; }
  el.innerHTML = "";
  window.echarts.init(el, null, {renderer: "canvas"}).setOption(option);
}
draw();
})();
</script>
`, id, option)
	return b.String()
}

// controlPage is the control's page, with library as the echarts library
// output.
func controlPage(library string) string { return controlPageHead("", library) }

// controlPageHead is controlPage with extra markup in the head.
func controlPageHead(head, library string) string {
	outs := []output{
		{Cell: 0, Index: 0, HTML: controlChart(controlDrawn, controlOption("drawn: 300 points", true), 300, true)},
		{Cell: 0, Index: 1, HTML: controlChart(controlEmpty, controlOption("axes only: empty series, the x axis through the middle", false), 300, true)},
		{Cell: 0, Index: 2, HTML: controlChart(controlUndrawn, "", 300, false)},
	}
	return buildPageHead("nbshot control", head, library, outs)
}

// judgeControl checks the control's measurements against controlExpect
// with threshold and returns one problem per mismatch.
func judgeControl(ms []measurement, threshold float64) []string {
	var problems []string
	seen := map[string]bool{}
	for _, m := range ms {
		want, ok := controlExpect[m.Chart.ID]
		if !ok {
			problems = append(problems, fmt.Sprintf("unexpected chart %q on the control page", m.Chart.ID))
			continue
		}
		seen[m.Chart.ID] = true
		if got := m.Fraction >= threshold; got != want {
			verb := "fails"
			if got {
				verb = "passes"
			}
			problems = append(problems, fmt.Sprintf("control chart %s %s (ink fraction %.4f%%, threshold %.4f%%)", m.Chart.ID, verb, 100*m.Fraction, 100*threshold))
		}
	}
	for id := range controlExpect {
		if !seen[id] {
			problems = append(problems, fmt.Sprintf("control chart %s is missing from the report", id))
		}
	}
	return problems
}
