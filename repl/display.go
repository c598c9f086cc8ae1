package repl

import (
	"context"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cli/browser"
	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/atomicfile"
	"github.com/forgeml/forge/internal/numfmt"
	"github.com/guptarohit/asciigraph"
)

// typeName names the type of a value for messages.
func typeName(v reflect.Value) string {
	x := valueOf(v)
	if x == nil {
		return "nil"
	}
	return reflect.TypeOf(x).String()
}

// inspect prints a tensor's description, statistics, gradient statistics,
// a histogram of its finite values and its values.
func (s *Session) inspect(name string, t *forge.Tensor) {
	w := s.stdout
	st := t.Stats()
	flags := ""
	if st.RequiresGrad {
		flags = ", requires grad"
	}
	label := name
	if st.ParameterName != "" && st.ParameterName != name {
		label += " (" + st.ParameterName + ")"
	}
	fmt.Fprintf(w, "%s: shape %v, %s elements, %v on %s%s\n", label, st.Shape, numfmt.Thousands(st.Count), st.DType, st.Device, flags)
	fmt.Fprintf(w, "  values  %s\n", statsLine(st))
	if g := t.Grad(); g != nil {
		gs := g.Stats()
		fmt.Fprintf(w, "  grad    %s, norm %.4g\n", statsLine(gs), norm(g))
		if s.run != nil && s.run.Trainer().Config.Precision == "float16" && t.Grad() != nil {
			fmt.Fprintln(w, "          (float16 run: a step's gradients include its loss scale, see :plot loss_scale)")
		}
	} else if st.RequiresGrad {
		fmt.Fprintln(w, "  grad    none yet (after a :step, parameters keep the last step's gradient)")
	}
	fmt.Fprint(w, histogram(t.Float64s(), 10, min(40, s.width()-36)))
	fmt.Fprintln(w, t.String())
}

func statsLine(st forge.Stats) string {
	s := fmt.Sprintf("min %.4g  max %.4g  mean %.4g  std %.4g", st.Min, st.Max, st.Mean, st.Std)
	if st.Zeros > 0 {
		s += fmt.Sprintf("  zeros %d", st.Zeros)
	}
	if bad := st.NaN + st.PosInf + st.NegInf; bad > 0 {
		s += fmt.Sprintf("  NaN %d  +Inf %d  -Inf %d", st.NaN, st.PosInf, st.NegInf)
	}
	return s
}

func norm(t *forge.Tensor) float64 {
	ss := 0.0
	for _, x := range t.Float64s() {
		ss += x * x
	}
	return math.Sqrt(ss)
}

// histogram draws the finite values in bins as rows of bars.
func histogram(v []float64, bins, width int) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	if math.IsInf(lo, 1) {
		return "  (no finite values)\n"
	}
	if hi == lo {
		bins = 1
	}
	width = max(width, 10)
	counts := make([]int, bins)
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		i := 0
		if hi > lo {
			i = min(int((x-lo)/(hi-lo)*float64(bins)), bins-1)
		}
		counts[i]++
	}
	top := slices.Max(counts)
	var b strings.Builder
	for i, c := range counts {
		edge := lo + (hi-lo)*float64(i)/float64(bins)
		n := int(math.Round(float64(c) / float64(top) * float64(width)))
		if c > 0 && n == 0 {
			n = 1
		}
		fmt.Fprintf(&b, "  %10.4g │%s %d\n", edge, strings.Repeat("█", n), c)
	}
	return b.String()
}

// Plots.

var metricNames = train.MetricNames

func cmdPlot(s *Session, _ context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	opts, names, err := flagArgs(args, []string{"last"}, []string{"browser"})
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return usagef("name one or more metrics: %s", strings.Join(metricNames, ", "))
	}
	last := 0
	if v, ok := opts["last"]; ok {
		if last, err = strconv.Atoi(v); err != nil || last < 2 {
			return usagef("--last wants a number of steps >= 2, got %q", v)
		}
	}
	h := &s.run.Trainer().History
	type series struct {
		name   string
		steps  []int
		values []float64
	}
	var all []series
	for _, name := range names {
		steps, values, err := h.Series(name)
		if err != nil {
			return err
		}
		if last > 0 && len(h.Steps) > 0 {
			from := h.Steps[max(0, len(h.Steps)-last)].Step
			i, _ := slices.BinarySearch(steps, from)
			steps, values = steps[i:], values[i:]
		}
		if len(values) == 0 {
			return fmt.Errorf("no %s recorded yet (train with :step or :run; val_loss comes every eval_every steps and at the end of a :run; the moe series need n_experts > 1)", name)
		}
		all = append(all, series{name, steps, values})
	}
	if opts["browser"] != "" {
		page := htmlPage(s.run.Dir(), func(add func(name string, steps []int, values []float64)) {
			for _, sr := range all {
				add(sr.name, sr.steps, sr.values)
			}
		})
		dir := filepath.Join(s.run.Dir(), "plots")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		path := filepath.Join(dir, strings.Join(names, "-")+".html")
		if err := atomicfile.WriteBytes(path, []byte(page)); err != nil {
			return err
		}
		abs, _ := filepath.Abs(path)
		open := s.opts.OpenBrowser
		if open == nil {
			open = openBrowser
		}
		if err := open("file://" + abs); err != nil {
			fmt.Fprintf(s.stdout, "wrote %s (no browser could open it here; open it yourself)\n", path)
		} else {
			fmt.Fprintf(s.stdout, "wrote %s and opened it in the browser\n", path)
		}
		return nil
	}
	width := max(20, s.width()-14)
	for _, sr := range all {
		caption := fmt.Sprintf("%s, steps %d–%d (last %.4g)", sr.name, sr.steps[0], sr.steps[len(sr.steps)-1], sr.values[len(sr.values)-1])
		vals := sr.values
		if len(vals) == 1 {
			vals = []float64{vals[0], vals[0]}
		}
		fmt.Fprintln(s.stdout, asciigraph.Plot(vals, asciigraph.Width(width), asciigraph.Height(10), asciigraph.Caption(caption)))
	}
	return nil
}

// openBrowser opens url unless no display is known to be there.
func openBrowser(url string) error {
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" && os.Getenv("BROWSER") == "" && !isDesktop() {
		return fmt.Errorf("no display")
	}
	return browser.OpenURL(url)
}

// htmlPage is a self-contained page with one SVG line chart per series
// (no scripts, no network).
func htmlPage(title string, each func(add func(name string, steps []int, values []float64))) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<!doctype html>
<html><head><meta charset="utf-8"><title>%s — forge</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222} h2{font-size:15px;margin:18px 0 4px}
svg{background:#fff;border:1px solid #ddd} .ax{stroke:#999;stroke-width:1} .gr{stroke:#eee;stroke-width:1}
.ln{fill:none;stroke:#2563eb;stroke-width:1.6} text{font-size:11px;fill:#555}</style></head><body>
<h1 style="font-size:18px">%s</h1>
`, html.EscapeString(title), html.EscapeString(title))
	each(func(name string, steps []int, values []float64) {
		b.WriteString(svgChart(name, steps, values))
	})
	fmt.Fprintf(&b, "<p style=\"color:#888\">written by forge repl, %s</p>\n</body></html>\n", time.Now().Format(time.RFC1123))
	return b.String()
}

// svgChart draws values against steps with axes and five ticks on each.
func svgChart(name string, steps []int, values []float64) string {
	const W, H, L, R, T, B = 760.0, 260.0, 64.0, 16.0, 12.0, 28.0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	if hi == lo {
		lo, hi = lo-0.5, hi+0.5
	}
	x0, x1 := float64(steps[0]), float64(steps[len(steps)-1])
	if x1 == x0 {
		x0, x1 = x0-1, x1+1
	}
	px := func(x float64) float64 { return L + (x-x0)/(x1-x0)*(W-L-R) }
	py := func(y float64) float64 { return T + (hi-y)/(hi-lo)*(H-T-B) }
	var b strings.Builder
	fmt.Fprintf(&b, "<h2>%s</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\">\n", html.EscapeString(name), W, H, W, H)
	for i := 0; i <= 4; i++ {
		y := lo + (hi-lo)*float64(i)/4
		fmt.Fprintf(&b, "<line class=\"gr\" x1=\"%g\" x2=\"%g\" y1=\"%.1f\" y2=\"%.1f\"/><text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n", L, W-R, py(y), py(y), L-6, py(y)+4, y)
		x := x0 + (x1-x0)*float64(i)/4
		fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n", px(x), H-8, x)
	}
	fmt.Fprintf(&b, "<line class=\"ax\" x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\"/><line class=\"ax\" x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\"/>\n", L, W-R, H-B, H-B, L, L, T, H-B)
	b.WriteString("<polyline class=\"ln\" points=\"")
	for i, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", px(float64(steps[i])), py(v))
	}
	b.WriteString("\"/>\n</svg>\n")
	return b.String()
}

// isDesktop: macOS and Windows always have a browser to open.
func isDesktop() bool { return runtime.GOOS == "darwin" || runtime.GOOS == "windows" }
