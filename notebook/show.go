package notebook

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/profile"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
	"github.com/janpfeifer/gonb/gonbui"
)

// out receives the text forms outside a notebook.
var out io.Writer = os.Stdout

func isNotebook() bool { return gonbui.IsNotebook }

// displayHTML and updateHTML wait until GoNB has read what they sent
// (gonbui.Sync): a cell's process may exit right after, and GoNB would
// drop displays still in the pipe — those that follow the 1 MB echarts
// library, or a dashboard's final state.
func displayHTML(h string)    { gonbui.DisplayHTML(h); gonbui.Sync() }
func updateHTML(id, h string) { gonbui.UpdateHTML(id, h); gonbui.Sync() }

func newID(prefix string) string { return "forge-" + prefix + "-" + gonbui.UniqueId() }

// Text is generated text (a model's sample); Show renders it as a
// preformatted block.
type Text string

// Show displays x in the notebook as HTML (through GoNB), or prints its
// text form to stdout outside a notebook. It knows *forge.Tensor,
// nn.Module (including *gpt.Model), *train.Session, *train.Trainer,
// optim.Optimizer (its parameter groups: which get Muon, which AdamW),
// train.History, profile.Report, Text and string, error, and falls back
// to fmt's %v. A panic while rendering is shown as an error instead of
// ending the cell.
func Show(x any) {
	h, text := renderAny(x)
	emit(h, text)
}

func emit(h, text string) {
	if isNotebook() {
		displayHTML(h)
		return
	}
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	io.WriteString(out, text)
}

func renderAny(x any) (h, text string) {
	defer func() {
		if r := recover(); r != nil {
			msg := fmt.Sprintf("notebook: cannot show %T: %v", x, r)
			h, text = errorHTML(msg), msg
		}
	}()
	switch v := x.(type) {
	case nil:
		return "<pre>nil</pre>", "nil"
	case *forge.Tensor:
		return tensorHTML(v), tensorText(v)
	case *gpt.Model:
		return moduleHTML(fmt.Sprintf("GPT: %d layers, %d heads, dim %d, context %d, vocab %d", v.Config.Layers, v.Config.Heads, v.Config.Dim, v.Config.Context, v.Config.Vocab), nn.Summarize(v)),
			moduleText(nn.Summarize(v))
	case nn.Module:
		return moduleHTML(fmt.Sprintf("%T", v), nn.Summarize(v)), moduleText(nn.Summarize(v))
	case *train.Session:
		return historyHTML("Run "+v.Dir(), v.Trainer().History, nil), historyText(v.Trainer().History)
	case *train.Trainer:
		return historyHTML("Training", v.History, nil), historyText(v.History)
	case optim.Optimizer:
		return optimizerHTML(v), optimizerText(v)
	case train.History:
		return historyHTML("Training", v, nil), historyText(v)
	case *train.History:
		return historyHTML("Training", *v, nil), historyText(*v)
	case profile.Report:
		return reportHTML(&v), v.String()
	case *profile.Report:
		return reportHTML(v), v.String()
	case Text:
		return textHTML(string(v)), string(v)
	case string:
		return textHTML(v), v
	case error:
		return errorHTML(v.Error()), "error: " + v.Error()
	case fmt.Stringer:
		s := v.String()
		return "<pre>" + html.EscapeString(s) + "</pre>", s
	}
	s := fmt.Sprintf("%v", x)
	return "<pre>" + html.EscapeString(s) + "</pre>", s
}

const css = `<style>
.forge-box{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;font-size:13px;margin:4px 0}
.forge-box h4{margin:4px 0 6px 0;font-size:14px}
.forge-table{border-collapse:collapse;font-size:12px;font-family:Menlo,Consolas,monospace}
.forge-table th,.forge-table td{border:1px solid #ddd;padding:2px 6px;text-align:right}
.forge-table th{background:#f4f4f4;cursor:pointer}
.forge-table td.l,.forge-table th.l{text-align:left}
.forge-table td:not(.l){white-space:nowrap}
.forge-muted{color:#777}
.forge-bad{color:#b00020;font-weight:bold}
</style>`

func box(title, body string) string {
	return "<div class=\"forge-box\">" + css + "<h4>" + html.EscapeString(title) + "</h4>" + body + "</div>"
}

func errorHTML(msg string) string {
	return "<pre class=\"forge-error\" style=\"color:#b00020\">" + html.EscapeString(msg) + "</pre>"
}

func textHTML(s string) string {
	return "<pre class=\"forge-text\" style=\"white-space:pre-wrap;font-family:Georgia,serif;font-size:14px;line-height:1.45;background:#fafafa;border-left:3px solid #4a7;padding:8px 12px\">" +
		html.EscapeString(s) + "</pre>"
}

// ---- tensors

const (
	edgeRows = 4 // rows (and columns) shown at each end of a summarised table
	fullMax  = 12
)

func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	}
	return fmt.Sprintf("%.4g", v)
}

// shown lists the indices of n rows shown: all, or the first and last
// edgeRows with -1 standing for the elided middle.
func shown(n int) []int {
	var idx []int
	if n <= fullMax {
		for i := 0; i < n; i++ {
			idx = append(idx, i)
		}
		return idx
	}
	for i := 0; i < edgeRows; i++ {
		idx = append(idx, i)
	}
	idx = append(idx, -1)
	for i := n - edgeRows; i < n; i++ {
		idx = append(idx, i)
	}
	return idx
}

func tensorHeader(t *forge.Tensor) string {
	s := fmt.Sprintf("Tensor %v %v on %v", t.Shape(), t.DType(), t.Device().Name())
	if t.Name() != "" {
		s = t.Name() + ": " + s
	}
	if t.RequiresGradFlag() {
		s += ", requires grad"
	}
	if t.Grad() != nil {
		s += ", has grad"
	}
	return s
}

func statsRow(st forge.Stats) string {
	var b strings.Builder
	b.WriteString("<table class=\"forge-table\"><tr><th>count</th><th>min</th><th>max</th><th>mean</th><th>std</th><th>zeros</th><th>nan</th><th>+inf</th><th>-inf</th></tr><tr>")
	for _, c := range []string{fmt.Sprint(st.Count), num(st.Min), num(st.Max), num(st.Mean), num(st.Std), fmt.Sprint(st.Zeros)} {
		b.WriteString("<td>" + c + "</td>")
	}
	for _, n := range []int{st.NaN, st.PosInf, st.NegInf} {
		cls := ""
		if n > 0 {
			cls = " class=\"forge-bad\""
		}
		fmt.Fprintf(&b, "<td%s>%d</td>", cls, n)
	}
	b.WriteString("</tr></table>")
	return b.String()
}

// matrixView returns the values as rows×cols: the last axis as columns,
// every leading axis flattened into rows.
func matrixView(t *forge.Tensor) (rows, cols int, v []float64) {
	shape := t.Shape()
	v = t.Float64s()
	cols = 1
	if len(shape) > 0 {
		cols = shape[len(shape)-1]
	}
	if cols == 0 {
		return 0, 0, v
	}
	return len(v) / cols, cols, v
}

func tensorHTML(t *forge.Tensor) string {
	rows, cols, v := matrixView(t)
	var b strings.Builder
	b.WriteString("<table class=\"forge-table forge-values\">")
	ci := shown(cols)
	if len(t.Shape()) >= 2 {
		b.WriteString("<tr><th></th>")
		for _, c := range ci {
			if c < 0 {
				b.WriteString("<th>…</th>")
			} else {
				fmt.Fprintf(&b, "<th>%d</th>", c)
			}
		}
		b.WriteString("</tr>")
	}
	for _, r := range shown(rows) {
		b.WriteString("<tr>")
		if len(t.Shape()) >= 2 {
			if r < 0 {
				b.WriteString("<th>⋮</th>")
			} else {
				fmt.Fprintf(&b, "<th>%s</th>", rowLabel(t.Shape(), r))
			}
		}
		for _, c := range ci {
			switch {
			case r < 0 || c < 0:
				b.WriteString("<td class=\"forge-muted\">…</td>")
			default:
				x := v[r*cols+c]
				cls := ""
				if math.IsNaN(x) || math.IsInf(x, 0) {
					cls = " class=\"forge-bad\""
				}
				fmt.Fprintf(&b, "<td%s>%s</td>", cls, num(x))
			}
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	return box(tensorHeader(t), b.String()+"<div style=\"height:6px\"></div>"+statsRow(t.Stats()))
}

// rowLabel names row r of the flattened view by its leading indices.
func rowLabel(shape []int, r int) string {
	lead := shape[:len(shape)-1]
	idx := make([]string, len(lead))
	for i := len(lead) - 1; i >= 0; i-- {
		idx[i] = fmt.Sprint(r % lead[i])
		r /= lead[i]
	}
	return strings.Join(idx, ",")
}

func tensorText(t *forge.Tensor) string {
	return t.String() + "\n" + t.Stats().String()
}

// ShowHeatmap displays a 2-D tensor as a heatmap (a larger matrix as
// block means); outside a notebook it prints the tensor and its stats.
func ShowHeatmap(t *forge.Tensor) {
	defer catch("ShowHeatmap")
	sh := t.Shape()
	if len(sh) != 2 {
		emit(errorHTML(fmt.Sprintf("notebook: ShowHeatmap needs a 2-D tensor, not %v", sh)), fmt.Sprintf("notebook: ShowHeatmap needs a 2-D tensor, not %v", sh))
		return
	}
	title := tensorHeader(t)
	opt := HeatmapOption(title, sh[0], sh[1], t.Float64s())
	h := ChartHTML(newID("heatmap"), opt, 420, "heatmap of "+title+" (runs in a trusted notebook)\n"+t.Stats().String())
	emit(h, tensorText(t))
}

// ShowHistogram displays the distribution of a tensor's values in 50
// bins; outside a notebook it prints its stats and a text histogram.
func ShowHistogram(t *forge.Tensor) {
	defer catch("ShowHistogram")
	title := tensorHeader(t)
	v := t.Float64s()
	opt := HistogramOption(title, v, 50)
	h := ChartHTML(newID("hist"), opt, 320, "histogram of "+title+"\n"+t.Stats().String())
	emit(h, t.Stats().String()+"\n"+textHistogram(v, 10))
}

func textHistogram(v []float64, bins int) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	if lo > hi {
		return "(no finite values)"
	}
	w := (hi - lo) / float64(bins)
	if w == 0 {
		w = 1
	}
	counts := make([]int, bins)
	top := 0
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			i := min(int((x-lo)/w), bins-1)
			counts[i]++
			top = max(top, counts[i])
		}
	}
	var b strings.Builder
	for i, c := range counts {
		fmt.Fprintf(&b, "%10.4g │%s %d\n", lo+float64(i)*w, strings.Repeat("█", c*40/max(top, 1)), c)
	}
	return b.String()
}

// ---- modules

func moduleHTML(title string, s nn.Summary) string {
	// A notes column (quantiser, pruning mask) only when a row has one.
	notes := false
	for _, r := range s.Rows {
		notes = notes || r.Notes() != ""
	}
	var b strings.Builder
	b.WriteString("<table class=\"forge-table forge-params\"><tr><th class=\"l\">parameter</th><th class=\"l\">shape</th><th>count</th><th>share</th><th class=\"l\"></th>")
	if notes {
		b.WriteString("<th class=\"l\">notes</th>")
	}
	b.WriteString("</tr>")
	for _, r := range s.Rows {
		fmt.Fprintf(&b, "<tr><td class=\"l\">%s</td><td class=\"l\">%v</td><td>%s</td><td>%.1f%%</td><td class=\"l\"><div style=\"background:#4a7;height:8px;width:%.0fpx\"></div></td>",
			html.EscapeString(r.Name), r.Shape, numfmt.Thousands(r.Count), 100*r.Share, 1+120*r.Share)
		if notes {
			fmt.Fprintf(&b, "<td class=\"l\">%s</td>", html.EscapeString(r.Notes()))
		}
		b.WriteString("</tr>")
	}
	fmt.Fprintf(&b, "<tr><th class=\"l\">total</th><th></th><th>%s</th><th>100%%</th><th></th>", numfmt.Thousands(s.Total))
	if notes {
		b.WriteString("<th></th>")
	}
	b.WriteString("</tr></table>")
	return box(fmt.Sprintf("%s — %s parameters", title, numfmt.Thousands(s.Total)), b.String())
}

func moduleText(s nn.Summary) string { return s.String() }

// ---- optimizers

// optimizerHTML is a table of the optimizer's parameter groups: which
// update each parameter gets (Muon or AdamW), with its lr and decay.
func optimizerHTML(o optim.Optimizer) string {
	var b strings.Builder
	b.WriteString("<table class=\"forge-table forge-optim\"><tr><th class=\"l\">update</th><th>lr</th><th>weight decay</th><th>tensors</th><th>values</th><th class=\"l\">parameters</th></tr>")
	for _, g := range o.Describe() {
		fmt.Fprintf(&b, "<tr><td class=\"l\">%s</td><td>%.3g</td><td>%g</td><td>%d</td><td>%s</td><td class=\"l\">%s</td></tr>",
			g.Optimizer, g.LR, g.WeightDecay, len(g.Params), numfmt.Thousands(g.Elements), html.EscapeString(strings.Join(optim.FoldNames(g.Params), ", ")))
	}
	b.WriteString("</table>")
	return box(fmt.Sprintf("Optimizer %T at step %d", o, o.StepCount()), b.String())
}

func optimizerText(o optim.Optimizer) string {
	var b strings.Builder
	for _, g := range o.Describe() {
		fmt.Fprintln(&b, g)
	}
	return b.String()
}

// ---- training history

// curveSeries extracts the dashboard's series from a history.
func curveSeries(h train.History) (loss, val, lr, gn, tps Series) {
	loss, val = Series{Name: "loss"}, Series{Name: "val_loss"}
	lr, gn, tps = Series{Name: "lr"}, Series{Name: "grad_norm"}, Series{Name: "tokens/s"}
	for _, m := range h.Steps {
		x := float64(m.Step)
		loss.X, loss.Y = append(loss.X, x), append(loss.Y, m.Loss)
		if m.ValLoss != nil {
			val.X, val.Y = append(val.X, x), append(val.Y, *m.ValLoss)
		}
		lr.X, lr.Y = append(lr.X, x), append(lr.Y, m.LR)
		gn.X, gn.Y = append(gn.X, x), append(gn.Y, m.GradNorm)
		tps.X, tps.Y = append(tps.X, x), append(tps.Y, m.TokensPerSec)
	}
	return
}

// memorySeries is the device memory ledger of h: each phase's peak, in
// MB; nil if no step counted memory.
func memorySeries(h train.History) []Series {
	fw, bw, op := Series{Name: "forward"}, Series{Name: "backward"}, Series{Name: "optimizer"}
	for _, m := range h.Steps {
		if m.Memory == nil {
			continue
		}
		x := float64(m.Step)
		fw.X, fw.Y = append(fw.X, x), append(fw.Y, float64(m.Memory.ForwardPeak)/1e6)
		bw.X, bw.Y = append(bw.X, x), append(bw.Y, float64(m.Memory.BackwardPeak)/1e6)
		op.X, op.Y = append(op.X, x), append(op.Y, float64(m.Memory.OptimizerPeak)/1e6)
	}
	if len(fw.X) == 0 {
		return nil
	}
	return []Series{fw, bw, op}
}

// historyCharts renders the loss chart with the device memory ledger
// beside it, and the lr / grad norm / tokens/s charts of h. ids
// (historyChartIDs) keeps chart ids stable across live updates; nil makes
// new ones.
func historyCharts(h train.History, ids []string) string {
	if len(ids) < 6 {
		ids = historyChartIDs()
	}
	loss, val, lr, gn, tps := curveSeries(h)
	ph := historyText(h)
	var b strings.Builder
	lossChart := ChartHTML(ids[0], LineOption("loss", "step", "loss", false, loss, val), 300, ph)
	if mem := memorySeries(h); mem != nil {
		b.WriteString("<div style=\"display:flex;flex-wrap:wrap;gap:4px;max-width:960px\">")
		b.WriteString("<div style=\"flex:2 1 460px;min-width:300px\">" + lossChart + "</div>")
		b.WriteString("<div style=\"flex:1 1 300px;min-width:260px\">")
		b.WriteString(ChartHTML(ids[4], LineOption("device memory, peak per phase", "step", "MB", false, mem...), 300, "device memory (MB)"))
		b.WriteString("</div></div>")
	} else {
		b.WriteString(lossChart)
	}
	b.WriteString("<div style=\"display:flex;flex-wrap:wrap;gap:4px;max-width:960px\">")
	for i, c := range []struct {
		s    Series
		name string
	}{{lr, "learning rate"}, {gn, "grad norm (before clipping)"}, {tps, "tokens / s"}} {
		b.WriteString("<div style=\"flex:1 1 300px;min-width:260px\">")
		b.WriteString(ChartHTML(ids[i+1], LineOption(c.name, "step", "", false, c.s), 200, c.name))
		b.WriteString("</div>")
	}
	if router := routerSeries(h); router != nil {
		b.WriteString("<div style=\"flex:1 1 300px;min-width:260px\">")
		b.WriteString(ChartHTML(ids[5], LineOption("MoE routing (1 = balanced)", "step", "", false, router...), 200, "MoE routing"))
		b.WriteString("</div>")
	}
	b.WriteString("</div>")
	return b.String()
}

// routerSeries is a mixture of experts' routing over h (train.RouterMetrics):
// the load-balancing loss and the largest and smallest expert load; nil
// for a plain model.
func routerSeries(h train.History) []Series {
	aux, hi, lo := Series{Name: "aux loss"}, Series{Name: "max load"}, Series{Name: "min load"}
	for _, m := range h.Steps {
		if m.Router == nil {
			continue
		}
		x := float64(m.Step)
		aux.X, aux.Y = append(aux.X, x), append(aux.Y, m.Router.Aux)
		hi.X, hi.Y = append(hi.X, x), append(hi.Y, m.Router.LoadMax)
		lo.X, lo.Y = append(lo.X, x), append(lo.Y, m.Router.LoadMin)
	}
	if len(aux.X) == 0 {
		return nil
	}
	return []Series{aux, hi, lo}
}

// historyChartIDs are new ids for historyCharts' six charts.
func historyChartIDs() []string {
	return []string{newID("loss"), newID("lr"), newID("gradnorm"), newID("tps"), newID("memory"), newID("router")}
}

func historyHTML(title string, h train.History, ids []string) string {
	if len(h.Steps) == 0 {
		return box(title, "<p class=\"forge-muted\">no steps yet</p>")
	}
	return box(fmt.Sprintf("%s — %d steps", title, len(h.Steps)), metricsTable(h.Last(), lastVal(h))+historyCharts(h, ids))
}

func metricsTable(m train.Metrics, val *float64) string {
	v := "–"
	if val != nil {
		v = num(*val)
	}
	return fmt.Sprintf("<table class=\"forge-table forge-metrics\"><tr><th>step</th><th>loss</th><th>val_loss</th><th>lr</th><th>grad_norm</th><th>tokens/s</th><th>step ms</th><th>tokens</th></tr>"+
		"<tr><td>%d</td><td class=\"forge-loss\">%s</td><td class=\"forge-val-loss\">%s</td><td>%.3g</td><td>%s</td><td>%s</td><td>%.1f</td><td>%s</td></tr></table>",
		m.Step, num(m.Loss), v, m.LR, num(m.GradNorm), numfmt.Thousands(int(m.TokensPerSec)), m.StepMS, numfmt.Thousands(int(m.Tokens)))
}

func historyText(h train.History) string {
	if len(h.Steps) == 0 {
		return "no steps yet"
	}
	first, last := h.Steps[0], h.Last()
	s := fmt.Sprintf("%d steps: loss %s → %s", len(h.Steps), num(first.Loss), num(last.Loss))
	if v := lastVal(h); v != nil {
		s += ", val_loss " + num(*v)
	}
	s += fmt.Sprintf(", lr %.3g, grad_norm %s, %s tokens/s", last.LR, num(last.GradNorm), numfmt.Thousands(int(last.TokensPerSec)))
	return s
}

// ---- profile reports

// dur is d for HTML: "13.3 ms" with a non-breaking space, so that a
// narrow table column never wraps a time between number and unit.
func dur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3g\u00a0s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3g\u00a0ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3g\u00a0µs", float64(d)/1e3)
}

// sortScript makes the tables of class forge-sortable sort by a clicked
// column (numbers by their data-v value).
const sortScript = `<script>
(function(){
document.querySelectorAll("table.forge-sortable").forEach(function(t){
  if (t.__forgeSort) return; t.__forgeSort = true;
  t.querySelectorAll("th").forEach(function(th, col){
    th.addEventListener("click", function(){
      var rows = Array.prototype.slice.call(t.querySelectorAll("tr")).slice(1);
      var dir = th.__dir = -(th.__dir || 1);
      rows.sort(function(a, b){
        var x = a.children[col], y = b.children[col];
        var vx = x.getAttribute("data-v"), vy = y.getAttribute("data-v");
        if (vx !== null && vy !== null) return dir * (parseFloat(vx) - parseFloat(vy));
        return dir * x.textContent.localeCompare(y.textContent);
      });
      rows.forEach(function(r){ t.appendChild(r); });
    });
  });
});
})();
</script>`

func reportHTML(r *profile.Report) string {
	var b strings.Builder
	b.WriteString("<table class=\"forge-table forge-sortable forge-profile\"><tr><th class=\"l\">kernel</th><th class=\"l\">shape</th><th class=\"l\">device</th><th>calls</th><th>total</th><th>mean</th><th>share</th><th>GFLOP/s</th><th>GB/s</th>")
	roof := r.Peak != nil
	if roof {
		b.WriteString("<th>% roof</th><th class=\"l\">bound</th>")
	}
	b.WriteString("</tr>")
	for _, row := range r.Rows {
		shape := row.Shape
		if row.Phase != "" {
			shape = strings.TrimSpace(row.Phase + " " + shape)
		}
		fmt.Fprintf(&b, "<tr><td class=\"l\">%s</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td data-v=\"%g\">%g</td><td data-v=\"%d\">%s</td><td data-v=\"%d\">%s</td><td data-v=\"%g\">%.1f%%</td><td data-v=\"%g\">%.3g</td><td data-v=\"%g\">%.3g</td>",
			html.EscapeString(row.Label()), html.EscapeString(shape), html.EscapeString(row.Device), row.Calls, row.Calls,
			row.Total, dur(row.Total), row.Mean, dur(row.Mean), row.Share, 100*row.Share, row.GFLOPS, row.GFLOPS, row.GBps, row.GBps)
		if roof {
			fmt.Fprintf(&b, "<td data-v=\"%g\">%.0f%%</td><td class=\"l\">%s</td>", row.PctRoof, 100*row.PctRoof, html.EscapeString(row.Bound))
		}
		b.WriteString("</tr>")
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "<tr><td class=\"l forge-muted\">(%d more)</td><td></td><td></td><td></td><td>%s</td><td></td><td>%.1f%%</td><td></td><td></td></tr>", r.Omitted, dur(r.OmittedTotal), 100*r.OmittedShare)
	}
	b.WriteString("</table>")

	// The chart: kernel time per row, largest first, at most 30 bars.
	rows := slices.Clone(r.Rows)
	slices.SortStableFunc(rows, func(a, c profile.Row) int { return int(c.Total - a.Total) })
	if len(rows) > 30 {
		rows = rows[:30]
	}
	labels := make([]string, len(rows))
	ms := make([]float64, len(rows))
	for i, row := range rows {
		labels[i] = row.Label()
		if row.Shape != "" {
			labels[i] += " " + row.Shape
		}
		if row.Phase != "" {
			labels[i] += " [" + row.Phase + "]"
		}
		ms[i] = float64(row.Total) / 1e6
	}
	chart := ""
	if len(rows) > 0 {
		chart = ChartHTML(newID("profile"), BarOption("kernel time per iteration", "ms", labels, ms), max(160, 60+18*len(rows)), r.String())
	}
	if pk := r.Peak; pk != nil && pk.GFLOPS > 0 && pk.GBps > 0 {
		var pts []RooflinePoint
		left := 0
		for _, row := range r.Rows {
			if row.Device != pk.Device || row.FLOPs <= 0 || row.Bytes <= 0 || row.Total <= 0 {
				left++
				continue
			}
			label := row.Label()
			if row.Shape != "" {
				label += " " + row.Shape
			}
			pts = append(pts, RooflinePoint{Label: label, Intensity: row.Intensity, GFLOPS: row.GFLOPS, Share: row.Share})
		}
		if len(pts) > 0 {
			t := fmt.Sprintf("roofline on %s (%s)", pk.Device, pk.CPU)
			if left > 0 {
				t += fmt.Sprintf(", %d %s without FLOPs not placed", left, plural(left, "row", "rows"))
			}
			chart += ChartHTML(newID("roofline"), RooflineOption(t, pk.GFLOPS, pk.GBps, pts), 380,
				fmt.Sprintf("roofline: peak %.0f GFLOP/s, %.0f GB/s (runs in a trusted notebook)", pk.GFLOPS, pk.GBps))
		}
	}
	title := fmt.Sprintf("Profile: wall %s per iteration, kernels %s (%.0f%%), outside kernels %s, %.0f calls",
		dur(r.Wall), dur(r.Kernel), 100*r.KernelShare, dur(r.Outside), r.Calls)
	// Under the title, what ran: each device's line (the BLAS library and
	// its kernels) and the roofline the shares are of.
	var head strings.Builder
	for _, d := range r.DeviceInfo {
		fmt.Fprintf(&head, "<p class=\"forge-muted forge-device\">device: %s</p>", html.EscapeString(d))
	}
	if pk := r.Peak; pk != nil {
		fmt.Fprintf(&head, "<p class=\"forge-muted\">roofline: %s</p>", html.EscapeString(pk.Summary()))
	}
	return box(title, head.String()+b.String()+sortScript+chart)
}

// ---- tokens

// tokenColors are light backgrounds cycled over the pieces of a text.
var tokenColors = []string{"#ffd8a8", "#c3fae8", "#d0bfff", "#ffec99", "#a5d8ff", "#ffc9c9", "#b2f2bb", "#eebefa"}

// ShowTokens displays text as tok splits it: each token on a coloured
// background (the colour follows the token id, so repeated pieces match),
// with its id on hover; outside a notebook it prints the pieces separated
// by "|" and their ids.
func ShowTokens(tok tokenizer.Tokenizer, text string) {
	defer catch("ShowTokens")
	h, t := tokensRender(tok, text)
	emit(h, t)
}

func tokensRender(tok tokenizer.Tokenizer, text string) (string, string) {
	ids := tok.Encode(text)
	var b, tb strings.Builder
	b.WriteString("<div class=\"forge-tokens\" style=\"font-family:Menlo,Consolas,monospace;font-size:13px;line-height:1.9;white-space:pre-wrap\">")
	pieces := make([]string, len(ids))
	for i, id := range ids {
		piece := tok.Decode([]int{id})
		pieces[i] = piece
		shownPiece := strings.NewReplacer("\n", "↵\n", "\t", "→").Replace(piece)
		fmt.Fprintf(&b, "<span title=\"%d %s\" style=\"background:%s;border-radius:3px;padding:1px 0;margin-right:1px\">%s</span>",
			id, html.EscapeString(tok.Token(id)), tokenColors[id%len(tokenColors)], html.EscapeString(shownPiece))
	}
	b.WriteString("</div>")
	idStrs := make([]string, len(ids))
	for i, id := range ids {
		idStrs[i] = fmt.Sprint(id)
	}
	fmt.Fprintf(&tb, "%s tokenizer, %d tokens for %d characters (%.2f chars/token)\n", tok.Kind(), len(ids), len([]rune(text)), float64(len([]rune(text)))/float64(max(len(ids), 1)))
	tb.WriteString(strings.Join(pieces, "|") + "\n")
	tb.WriteString(strings.Join(idStrs, " "))
	title := fmt.Sprintf("%s tokenizer (vocabulary %d): %d tokens for %d characters", tok.Kind(), tok.VocabSize(), len(ids), len([]rune(text)))
	return box(title, b.String()), tb.String()
}

// plural picks the singular or plural noun for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lastVal is the latest validation loss of h (nil if none).
func lastVal(h train.History) *float64 {
	if m := h.LastVal(); m != nil {
		return m.ValLoss
	}
	return nil
}
