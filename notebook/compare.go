package notebook

import (
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/forgeml/forge/forge/train"
)

// Run is one curve of Compare: a name and the history it comes from.
type Run struct {
	Name    string
	History train.History
}

// Compare draws one metric of several runs on one chart (loss,
// val_loss, lr, grad_norm, tokens_per_sec, step_ms or any series of
// train.History.Series), with a table of each run's last value, as HTML
// in a notebook and as that table outside one. Runs without the metric
// are listed as such.
func Compare(metric string, runs ...Run) {
	h, text := compareHTML(metric, runs)
	emit(h, text)
}

func compareHTML(metric string, runs []Run) (string, string) {
	var series []Series
	var rows [][2]string
	for _, r := range runs {
		steps, vals, err := r.History.Series(metric)
		if err != nil || len(steps) == 0 {
			rows = append(rows, [2]string{r.Name, "–"})
			continue
		}
		s := Series{Name: r.Name}
		last := math.NaN()
		for i, st := range steps {
			s.X = append(s.X, float64(st))
			s.Y = append(s.Y, vals[i])
			if !math.IsNaN(vals[i]) {
				last = vals[i]
			}
		}
		series = append(series, s)
		rows = append(rows, [2]string{r.Name, num(last)})
	}
	var t strings.Builder
	fmt.Fprintf(&t, "%s at the last step:\n", metric)
	for _, r := range rows {
		fmt.Fprintf(&t, "  %-24s %s\n", r[0], r[1])
	}
	var b strings.Builder
	b.WriteString("<table class=\"forge-table forge-compare\"><tr><th>run</th><th>" + html.EscapeString(metric) + " (last)</th></tr>")
	for _, r := range rows {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td></tr>", html.EscapeString(r[0]), r[1])
	}
	b.WriteString("</table>")
	if len(series) > 0 {
		b.WriteString(ChartHTML(newID("compare"), LineOption(metric+" by run", "step", metric, false, series...), 340, t.String()))
	}
	return box(metric+": "+fmt.Sprint(len(runs))+" runs", b.String()), t.String()
}
