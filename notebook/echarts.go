package notebook

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-echarts/go-echarts/v2/render"
	"github.com/janpfeifer/gonb/gonbui/protocol"
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

// libPayload is the library gzip-compressed and base64-encoded: 1.03 MB
// of JavaScript becomes ~0.45 MB of page text. It is made once, when a
// process first sends the library.
var libPayload = sync.OnceValue(func() string {
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	w.Write([]byte(echartsJS))
	w.Close()
	return base64.StdEncoding.EncodeToString(z.Bytes())
})

// libraryHTML is the echarts library as one HTML fragment: a hidden
// marker and the compressed library as inert data (a script element of a
// non-JavaScript type, which browsers keep but do not run), then a
// script that loads it at once. Charts also look for it on the page
// (loaderJS) and decompress and run it, so that it
// registers as window.echarts even where require.js defines `define`
// (classic Notebook).
func libraryHTML() string {
	var b strings.Builder
	p := libPayload()
	b.Grow(len(p) + 256)
	b.WriteString("<div class=\"forge-echarts-lib\" style=\"display:none\">echarts ")
	b.WriteString(EChartsVersion)
	b.WriteString("</div>\n<script type=\"application/x-forge-echarts\" class=\"forge-echarts-data\" data-version=\"")
	b.WriteString(EChartsVersion)
	b.WriteString("\" data-encoding=\"gzip+base64\">")
	b.WriteString(p)
	b.WriteString("</script>\n<script>\n")
	b.WriteString(loaderJS)
	b.WriteString("window.__forgeEcharts();\n</script>\n")
	return b.String()
}

// loaderJS defines window.__forgeEcharts(), which every chart's script
// calls until window.echarts exists: it looks for the library's data on
// the page (the first chart of a kernel session carries it; charts of
// later cells find it there, whatever order the outputs render in),
// decompresses it with the browser's DecompressionStream and runs it. It
// returns a message when the page cannot have echarts, "" otherwise.
const loaderJS = `if (!window.__forgeEcharts) {
  window.__forgeEcharts = function() {
    if (window.echarts || window.__forgeEchartsLoading) { return ""; }
    var d = document.querySelector("script.forge-echarts-data");
    if (!d) { return "echarts is not on this page: run a chart cell again"; }
    if (!window.DecompressionStream) { return "this browser cannot decompress echarts (no DecompressionStream)"; }
    window.__forgeEchartsLoading = true;
    var bin = atob(d.textContent.replace(/\s+/g, ""));
    var u = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { u[i] = bin.charCodeAt(i); }
    new Response(new Blob([u]).stream().pipeThrough(new DecompressionStream("gzip"))).text().then(function(src) {
      if (!window.echarts) { (new Function("define", "module", "exports", src)).call(window); }
    }).catch(function(e) { window.__forgeEchartsError = String(e); });
    return "";
  };
}
`

// libraryOnPage reports whether this kernel session's page already has
// the library, and records that it will from now on. GoNB runs each cell
// as a process but keeps one temporary directory ($GONB_TMP_DIR) per
// kernel session: a marker there makes the library go once per session,
// not once per cell. Elsewhere it goes once per process.
func libraryOnPage() bool {
	libMu.Lock()
	defer libMu.Unlock()
	if libSent {
		return true
	}
	libSent = true
	if dir := os.Getenv(protocol.GONB_TMP_DIR_ENV); dir != "" {
		marker := filepath.Join(dir, "forge-echarts-"+EChartsVersion+".sent")
		f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return os.IsExist(err)
		}
		f.Close()
	}
	return false
}

// ResendLibrary makes the next chart carry the echarts library again, for
// when the output that carried it was cleared or its cell run again (its
// new output no longer has it): the charts of the saved notebook would
// otherwise say that echarts is not on the page.
func ResendLibrary() {
	libMu.Lock()
	defer libMu.Unlock()
	libSent = false
	if dir := os.Getenv(protocol.GONB_TMP_DIR_ENV); dir != "" {
		os.Remove(filepath.Join(dir, "forge-echarts-"+EChartsVersion+".sent"))
	}
}

// ensureLibrary displays the echarts library in its own output unless
// the page has it (libraryOnPage); a live dashboard calls it first, as
// its own output is replaced at every update.
func ensureLibrary() {
	if !isNotebook() || libraryOnPage() {
		return
	}
	displayHTML(libraryHTML())
}

// ChartHTML renders an echarts option (JSON text, e.g. go-echarts'
// RenderSnippet().Option, or any value that marshals to JSON) as an HTML
// fragment: a div holding placeholder, a text shown where scripts do not
// run (untrusted notebooks, nbconvert to HTML without JavaScript), and a
// script that waits for window.echarts, disposes an older chart drawn with
// the same id, and draws this one. The option's non-finite numbers are
// already "-" (see Value); "</script>" and other markup inside its strings
// is escaped so it cannot end the script. The fragment draws by itself:
// the first chart of a kernel session (of a process outside GoNB) carries
// the compressed echarts library, later ones a small loader that finds it
// on the page (see ResendLibrary).
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
	if !libraryOnPage() {
		b.WriteString(libraryHTML())
	}
	fmt.Fprintf(&b, "<div id=\"%s\" class=\"forge-chart\" style=\"width:100%%;max-width:960px;height:%dpx\">", html.EscapeString(id), height)
	fmt.Fprintf(&b, "<pre class=\"forge-chart-placeholder\" style=\"margin:0;padding:8px;color:#666;font-size:12px;white-space:pre-wrap\">%s</pre></div>\n", html.EscapeString(placeholder))
	b.WriteString("<script>\n")
	b.WriteString(loaderJS)
	b.WriteString("(function(){\n")
	fmt.Fprintf(&b, "var id = %s;\nvar option = %s;\n", htmlSafeJSON(idJS), opt)
	b.WriteString(`var tries = 0;
function draw() {
  var el = document.getElementById(id);
  var why = window.echarts ? "" : window.__forgeEcharts();
  if (!window.echarts || !el) {
    if (tries++ < 400) { setTimeout(draw, 25); }
    else if (el && why) { el.firstChild && (el.firstChild.textContent = why + "\n" + el.firstChild.textContent); }
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
