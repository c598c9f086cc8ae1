package notebook

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"strings"
	"sync"

	"github.com/go-echarts/go-echarts/v2/render"
)

// echartsJS is Apache ECharts 5.6.0 (dist/echarts.min.js from the npm
// package), fetched by scripts/fetch-echarts.sh; see assets/PROVENANCE.md.
//
//go:embed assets/echarts.min.js
var echartsJS string

// EChartsVersion is the version of the inlined echarts library.
const EChartsVersion = "5.6.0"

// MaxPoints is the most points a chart series keeps; longer series are
// downsampled (see Downsample).
const MaxPoints = 2000

var (
	libMu   sync.Mutex
	libSent bool
)

// libraryHTML is the echarts library as one HTML fragment. It is wrapped
// so that it registers as window.echarts even where require.js defines
// `define` (classic Notebook), and skipped when the page already has it.
func libraryHTML() string {
	var b strings.Builder
	b.Grow(len(echartsJS) + 256)
	b.WriteString("<div class=\"forge-echarts-lib\" style=\"display:none\">echarts ")
	b.WriteString(EChartsVersion)
	b.WriteString("</div>\n<script>\nif (!window.echarts) {\n(function(define,module,exports){\n")
	b.WriteString(echartsJS)
	b.WriteString("\n}).call(window);\n}\n</script>\n")
	return b.String()
}

// ensureLibrary displays the echarts library once per process (each GoNB
// cell is a process) in its own output, before the first chart.
func ensureLibrary() {
	libMu.Lock()
	defer libMu.Unlock()
	if libSent || !isNotebook() {
		return
	}
	displayHTML(libraryHTML())
	libSent = true
}

// ChartHTML renders an echarts option (JSON text, e.g. go-echarts'
// RenderSnippet().Option, or any value that marshals to JSON) as an HTML
// fragment: a div holding placeholder, a text shown where scripts do not
// run (untrusted notebooks, nbconvert to HTML without JavaScript), and a
// script that waits for window.echarts, disposes an older chart drawn with
// the same id, and draws this one. The option's non-finite numbers are
// already "-" (see Value); "</script>" and other markup inside its strings
// is escaped so it cannot end the script. The library itself is not part
// of the fragment (see Show, which sends it once per process).
func ChartHTML(id string, option any, height int, placeholder string) string {
	opt, err := optionJSON(option)
	if err != nil {
		return fmt.Sprintf("<div class=\"forge-chart-error\">chart %s: %s</div>", html.EscapeString(id), html.EscapeString(err.Error()))
	}
	if height <= 0 {
		height = 320
	}
	idJS, _ := json.Marshal(id)
	var b strings.Builder
	fmt.Fprintf(&b, "<div id=\"%s\" class=\"forge-chart\" style=\"width:100%%;max-width:960px;height:%dpx\">", html.EscapeString(id), height)
	fmt.Fprintf(&b, "<pre class=\"forge-chart-placeholder\" style=\"margin:0;padding:8px;color:#666;font-size:12px;white-space:pre-wrap\">%s</pre></div>\n", html.EscapeString(placeholder))
	b.WriteString("<script>\n(function(){\n")
	fmt.Fprintf(&b, "var id = %s;\nvar option = %s;\n", htmlSafeJSON(idJS), opt)
	b.WriteString(`var tries = 0;
function draw() {
  var el = document.getElementById(id);
  if (!window.echarts || !el) {
    if (tries++ < 400) { setTimeout(draw, 25); }
    return;
  }
  var reg = window.__forgeCharts = window.__forgeCharts || {};
  var old = reg[id] || window.echarts.getInstanceByDom(el);
  if (old && !old.isDisposed()) { old.dispose(); }
  el.innerHTML = "";
  var chart = window.echarts.init(el, null, {renderer: "canvas"});
  chart.setOption(option);
  reg[id] = chart;
  // Follow the element's size: a chart drawn before the page's layout
  // settled (a static HTML export, a dashboard row still filling in)
  // or in a resized window redraws at its real width.
  var resize = function(){ var c = reg[id]; if (c && !c.isDisposed()) { c.resize(); } };
  if (!el.__forgeResize) {
    el.__forgeResize = true;
    if (window.ResizeObserver) { new ResizeObserver(resize).observe(el); }
    else { window.addEventListener("resize", resize); }
  }
}
draw();
})();
</script>
`)
	return b.String()
}

// optionJSON returns option as compact JSON that is safe inside a script
// element: "<", ">" and "&" inside strings are written as \u escapes.
func optionJSON(option any) (string, error) {
	var raw []byte
	switch o := option.(type) {
	case string:
		raw = []byte(o)
	case []byte:
		raw = o
	case render.ChartSnippet:
		raw = []byte(o.Option)
	default:
		var err error
		raw, err = json.Marshal(sanitize(option))
		if err != nil {
			return "", fmt.Errorf("option: %v", err)
		}
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !json.Valid(raw) {
		return "", fmt.Errorf("option is not valid JSON (a NaN or Inf in the data?)")
	}
	var c bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return "", err
	}
	return htmlSafeJSON(c.Bytes()), nil
}

// htmlSafeJSON escapes <, >, & and U+2028/9 inside JSON strings (outside
// strings JSON has none of them).
func htmlSafeJSON(b []byte) string {
	var out bytes.Buffer
	json.HTMLEscape(&out, b)
	return out.String()
}

// Value is a chart data value: v, or "-" (echarts' missing value) when v is
// NaN or ±Inf, which JSON cannot hold.
func Value(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return v
}

// sanitize maps the non-finite floats of common containers to "-".
func sanitize(v any) any {
	switch x := v.(type) {
	case float64:
		return Value(x)
	case float32:
		return Value(float64(x))
	case []float64:
		out := make([]any, len(x))
		for i, f := range x {
			out[i] = Value(f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = sanitize(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = sanitize(e)
		}
		return out
	}
	return v
}

// Downsample returns at most max (x, y) points of a series: every point
// when it is short enough, else one point per bucket of consecutive
// points — the bucket's extreme (largest |y - bucket mean|, so spikes
// survive) — plus the first and last points. Non-finite y values count as
// spikes and are kept as gaps.
func Downsample(xs []float64, ys []float64, max int) ([]float64, []float64) {
	n := min(len(xs), len(ys))
	if max < 3 {
		max = 3
	}
	if n <= max {
		return xs[:n], ys[:n]
	}
	ox := make([]float64, 0, max)
	oy := make([]float64, 0, max)
	ox, oy = append(ox, xs[0]), append(oy, ys[0])
	buckets := max - 2
	inner := n - 2
	for b := 0; b < buckets; b++ {
		lo := 1 + b*inner/buckets
		hi := 1 + (b+1)*inner/buckets
		if hi <= lo {
			continue
		}
		mean, cnt := 0.0, 0
		for i := lo; i < hi; i++ {
			if !math.IsNaN(ys[i]) && !math.IsInf(ys[i], 0) {
				mean += ys[i]
				cnt++
			}
		}
		if cnt > 0 {
			mean /= float64(cnt)
		}
		best, bestD := lo, -1.0
		for i := lo; i < hi; i++ {
			d := math.Abs(ys[i] - mean)
			if math.IsNaN(ys[i]) || math.IsInf(ys[i], 0) {
				d = math.Inf(1)
			}
			if d > bestD {
				best, bestD = i, d
			}
		}
		ox, oy = append(ox, xs[best]), append(oy, ys[best])
	}
	ox, oy = append(ox, xs[n-1]), append(oy, ys[n-1])
	return ox, oy
}

// pairs turns a series into echarts [x, y] data, downsampled, with
// non-finite values as "-".
func pairs(xs, ys []float64) [][2]any {
	xs, ys = Downsample(xs, ys, MaxPoints)
	out := make([][2]any, len(xs))
	for i := range xs {
		out[i] = [2]any{Value(xs[i]), Value(ys[i])}
	}
	return out
}
