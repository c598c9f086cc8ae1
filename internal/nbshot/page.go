package main

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"strings"
)

// chartMarker marks an output that holds a chart (notebook.ChartHTML).
const chartMarker = `class="forge-chart"`

// libraryMarker marks the output that carries the echarts library
// (notebook.libraryHTML); dataMarker the compressed library itself, which
// the first chart of a kernel session carries inside its own output.
const (
	libraryMarker = "forge-echarts-lib"
	dataMarker    = `class="forge-echarts-data"`
)

// pageWidth is the width in CSS pixels of a check page and of the browser
// window that renders it.
const pageWidth = 1000

// output is one HTML output of a notebook cell.
type output struct {
	Cell, Index int // cell number and output number inside the cell, from 0
	HTML        string
}

// charts is what a check page needs from an executed notebook.
type charts struct {
	Library string   // the first echarts library output, "" when none
	Outputs []output // the outputs that hold charts, in notebook order
	// HasLibrary: some output (Library or a chart) carries the library.
	HasLibrary bool
}

// ipynb is the part of the nbformat 4 JSON that nbshot reads.
type ipynb struct {
	Cells []struct {
		CellType string `json:"cell_type"`
		Outputs  []struct {
			OutputType string                     `json:"output_type"`
			Data       map[string]json.RawMessage `json:"data"`
		} `json:"outputs"`
	} `json:"cells"`
}

// multiline decodes an nbformat multiline string: one string or a list of
// strings to be joined.
func multiline(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []string
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("not a string or a list of strings")
	}
	return strings.Join(parts, ""), nil
}

// extract finds the chart outputs and the echarts library of an executed
// notebook (its .ipynb JSON).
func extract(data []byte) (charts, error) {
	var nb ipynb
	var c charts
	if err := json.Unmarshal(data, &nb); err != nil {
		return c, fmt.Errorf("not a notebook: %v", err)
	}
	for ci, cell := range nb.Cells {
		if cell.CellType != "code" {
			continue
		}
		for oi, o := range cell.Outputs {
			if o.OutputType != "display_data" && o.OutputType != "execute_result" {
				continue
			}
			raw, ok := o.Data["text/html"]
			if !ok {
				continue
			}
			h, err := multiline(raw)
			if err != nil {
				return c, fmt.Errorf("cell %d output %d: text/html: %v", ci, oi, err)
			}
			if strings.Contains(h, libraryMarker) || strings.Contains(h, dataMarker) {
				c.HasLibrary = true
			}
			switch {
			case strings.Contains(h, chartMarker):
				c.Outputs = append(c.Outputs, output{Cell: ci, Index: oi, HTML: h})
			case strings.Contains(h, libraryMarker):
				if c.Library == "" {
					c.Library = h
				}
			}
		}
	}
	return c, nil
}

// countCharts is the number of chart divs in the outputs.
func (c charts) countCharts() int {
	n := 0
	for _, o := range c.Outputs {
		n += strings.Count(o.HTML, chartMarker)
	}
	return n
}

// libraryFromJS wraps the echarts library source the way the notebook
// package sends it, so that it registers as window.echarts.
func libraryFromJS(js string) string {
	return "<div class=\"forge-echarts-lib\" style=\"display:none\">echarts</div>\n" +
		"<script>\nif (!window.echarts) {\n(function(define,module,exports){\n" +
		js + "\n}).call(window);\n}\n</script>\n"
}

// Timing of the report script, in (virtual) milliseconds: how long it waits
// for every chart to get an echarts instance (longer than the 400 × 25 ms
// the chart scripts themselves wait for the library), and how long it then
// lets drawing and animations run before measuring.
const (
	waitMS   = 11000
	settleMS = 1500
	// budgetMS is the virtual time budget given to chromium: the report is
	// written after at most waitMS + settleMS.
	budgetMS = waitMS + settleMS + 3000
)

// insetPx is how far inside the grid rectangle the measured area starts:
// the axis lines lie on its edges. marginFrac is the margin cut from each
// side of the chart box of a chart without a cartesian grid.
const (
	insetPx    = 3
	marginFrac = 0.1
)

// reportScript writes, once every chart div has an echarts instance (or
// after waitMS), a JSON report into <pre id="forge-report">: the page size
// and, per chart div, its id, whether echarts drew it and the rectangle
// (page pixels) to measure.
var reportScript = fmt.Sprintf(`<script>
(function(){
var WAIT = %d, SETTLE = %d, INSET = %d, MARGIN = %g;
var start = Date.now();
function divs() { return Array.prototype.slice.call(document.querySelectorAll("div.forge-chart")); }
function inst(el) { return window.echarts ? window.echarts.getInstanceByDom(el) : null; }
function poll() {
  var ready = divs().every(function(el){ var c = inst(el); return c && !c.isDisposed(); });
  if (!ready && Date.now() - start < WAIT) { setTimeout(poll, 50); return; }
  setTimeout(report, SETTLE);
}
function report() {
  var de = document.documentElement;
  var out = {width: Math.max(de.scrollWidth, document.body.scrollWidth),
    height: Math.max(de.scrollHeight, document.body.scrollHeight),
    dpr: window.devicePixelRatio, echarts: !!window.echarts, waitedMS: Date.now() - start, charts: []};
  divs().forEach(function(el, i){
    var b = el.getBoundingClientRect();
    var left = b.left + window.scrollX, top = b.top + window.scrollY;
    var c = {index: i, id: el.id, drawn: false, area: "box", boxW: b.width, boxH: b.height};
    var ch = inst(el), r = null;
    if (ch && !ch.isDisposed()) {
      c.drawn = true;
      c.width = ch.getWidth(); c.height = ch.getHeight();
      try {
        var ss = ch.getOption().series || [];
        c.progressive = ss.some(function(x){ return x && x.progressive !== 0; });
      } catch (e) { c.error = String(e); }
      try {
        // Where the title, legend and colour scale were laid out (page
        // pixels relative to the chart), to find overlaps.
        c.boxes = {};
        ["title", "legend", "visualMap"].forEach(function(k){
          var m = ch.getModel().getComponent(k);
          if (!m || m.get("show") === false) { return; }
          var v = ch.getViewOfComponentModel(m);
          if (!v || !v.group) { return; }
          var r = v.group.getBoundingRect().clone();
          if (v.group.transform) { r.applyTransform(v.group.transform); }
          if (r.width > 0 && r.height > 0) { c.boxes[k] = {x: r.x, y: r.y, w: r.width, h: r.height}; }
        });
      } catch (e) { c.error = String(e); }
      try {
        var g = ch.getModel().getComponent("grid");
        var cs = g && g.coordinateSystem;
        if (cs && cs.getRect) { r = cs.getRect(); }
      } catch (e) { c.error = String(e); }
    }
    if (r && r.width > 2 * INSET && r.height > 2 * INSET) {
      c.area = "grid";
      c.x = left + r.x + INSET; c.y = top + r.y + INSET;
      c.w = r.width - 2 * INSET; c.h = r.height - 2 * INSET;
    } else {
      c.x = left + b.width * MARGIN; c.y = top + b.height * MARGIN;
      c.w = b.width * (1 - 2 * MARGIN); c.h = b.height * (1 - 2 * MARGIN);
    }
    out.charts.push(c);
  });
  document.getElementById("forge-report").textContent = JSON.stringify(out);
}
poll();
})();
</script>
`, waitMS, settleMS, insetPx, marginFrac)

// pageCSS fixes the page width and background, hides the text placeholders
// of charts (echarts replaces them when it draws; a chart left undrawn must
// measure as blank, not as its fallback text) and the report.
var pageCSS = fmt.Sprintf(`<style>
html, body { margin: 0; padding: 0; background: #fff; }
body { width: %dpx; box-sizing: border-box; padding: 0 20px; overflow: hidden; }
.nbshot-label { font: 11px/1.4 sans-serif; color: #999; margin: 10px 0 2px 0; }
.forge-chart-placeholder { visibility: hidden !important; }
#forge-report { display: none; }
</style>
`, pageWidth)

// noProgressive turns off echarts' progressive rendering on the check page,
// through its public preprocessor hook. Series with more than a few
// thousand items (a 64×64 heatmap) are otherwise drawn in chunks from a
// loop that runs until Date.now() has moved on by a millisecond — and under
// --virtual-time-budget the clock stands still while a script runs, so the
// loop never ends and Chromium hangs. Drawn in one go, the final picture is
// the same.
//
// The hook must be in place before any chart calls setOption. A script
// after the library is not enough: the HTML parser may yield between two
// scripts and let a waiting chart draw first (a hang in one run of three).
// So this script, at the top of the page, makes window.echarts a property
// whose getter registers the preprocessor the first time it is read after
// the library has filled it in.
const noProgressive = `<script>
(function(){
  var lib, hooked = false;
  function pre(option) {
    var s = option && option.series;
    if (!s) { return; }
    (Array.isArray(s) ? s : [s]).forEach(function(x){ if (x && typeof x === "object") { x.progressive = 0; } });
  }
  Object.defineProperty(window, "echarts", {configurable: true, enumerable: true,
    get: function() {
      if (lib && !hooked && typeof lib.registerPreprocessor === "function") {
        hooked = true;
        lib.registerPreprocessor(pre);
      }
      return lib;
    },
    set: function(v) { lib = v; hooked = false; }
  });
})();
</script>
`

// buildPage is a standalone HTML page: the chart outputs stacked in order,
// each under a small label, then the echarts library once, then the report
// script. The library comes last on purpose: the chart scripts wait for it,
// so every chart is drawn once the whole page has been laid out — as in
// Jupyter, which inserts an output's HTML whole before running its
// scripts. With the library first, a chart would be drawn while the parser
// is still inside its output (a dashboard's first small chart alone in its
// flex row, at the full width) and keep that size.
func buildPage(title, library string, outs []output) string {
	return buildPageHead(title, "", library, outs)
}

// buildPageHead is buildPage with extra markup at the end of the head
// (a <script> the page must load first, such as require.js).
func buildPageHead(title, head, library string, outs []output) string {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>")
	b.WriteString(html.EscapeString(title))
	b.WriteString("</title>\n")
	b.WriteString(pageCSS)
	b.WriteString(noProgressive)
	b.WriteString(head)
	b.WriteString("</head>\n<body>\n")
	for _, o := range outs {
		fmt.Fprintf(&b, "<div class=\"nbshot-output\" data-cell=\"%d\" data-output=\"%d\">\n", o.Cell, o.Index)
		fmt.Fprintf(&b, "<div class=\"nbshot-label\">%s · cell %d, output %d</div>\n", html.EscapeString(title), o.Cell, o.Index)
		b.WriteString(o.HTML)
		b.WriteString("\n</div>\n")
	}
	b.WriteString(library)
	b.WriteString("<pre id=\"forge-report\"></pre>\n")
	b.WriteString(reportScript)
	b.WriteString("</body></html>\n")
	return b.String()
}

// box is a rectangle in a chart's pixels.
type box struct{ X, Y, W, H float64 }

// overlaps reports whether a and b share more than a pixel's sliver.
func (a box) overlaps(b box) bool {
	return math.Min(a.X+a.W, b.X+b.W)-math.Max(a.X, b.X) > 1 && math.Min(a.Y+a.H, b.Y+b.H)-math.Max(a.Y, b.Y) > 1
}

// chartReport is the report script's entry for one chart div.
type chartReport struct {
	Index int     `json:"index"`
	ID    string  `json:"id"`
	Drawn bool    `json:"drawn"` // echarts has an instance on the div
	Area  string  `json:"area"`  // "grid" or "box"
	X     float64 `json:"x"`
	Y     float64 `json:"y"`
	W     float64 `json:"w"`
	H     float64 `json:"h"`
	Error string  `json:"error"`
	// The div's size, the size echarts drew the chart at (the same unless
	// the chart missed a resize), and
	// whether a series kept progressive rendering (see noProgressive).
	BoxW        float64 `json:"boxW"`
	BoxH        float64 `json:"boxH"`
	Width       float64 `json:"width"`
	Height      float64 `json:"height"`
	Progressive bool    `json:"progressive"`
	// Boxes are the laid-out rectangles of the title, legend and
	// visualMap components that are shown, by component.
	Boxes map[string]box `json:"boxes"`
}

// pageReport is what the report script writes.
type pageReport struct {
	Width    int           `json:"width"`
	Height   int           `json:"height"`
	DPR      float64       `json:"dpr"`
	ECharts  bool          `json:"echarts"`
	WaitedMS float64       `json:"waitedMS"`
	Charts   []chartReport `json:"charts"`
}

// parseReport finds the report in a DOM dumped by chromium.
func parseReport(dom string) (pageReport, error) {
	var r pageReport
	const open = `<pre id="forge-report">`
	i := strings.Index(dom, open)
	if i < 0 {
		return r, fmt.Errorf("no <pre id=\"forge-report\"> in the dumped DOM")
	}
	rest := dom[i+len(open):]
	j := strings.Index(rest, "</pre>")
	if j < 0 {
		return r, fmt.Errorf("unterminated report element")
	}
	text := strings.TrimSpace(html.UnescapeString(rest[:j]))
	if text == "" {
		return r, fmt.Errorf("the report is empty: the report script did not finish within the virtual time budget")
	}
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return r, fmt.Errorf("report: %v", err)
	}
	return r, nil
}
