package notebook

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
)

// now is the dashboard's clock (tests replace it).
var now = time.Now

// UpdateInterval is the least time between two live dashboard updates.
var UpdateInterval = time.Second

// Train runs n training steps of s (s.Train, which saves a checkpoint at
// the end) and shows one live dashboard — progress bar, ETA, the current
// metrics and the loss, lr, grad norm and tokens/s curves — updated in
// place at most once per UpdateInterval, and drawn complete once more when
// training ends, so a saved notebook keeps the final state. An interrupt
// (SIGINT, which GoNB sends to the cell) stops training at the next step
// boundary; the run is saved and the final dashboard drawn, and Train
// returns nil. Outside a notebook it prints one progress line per update.
func Train(s *train.Session, n int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := trainCtx(ctx, s, n)
	return err
}

// dashboard is the state of one live training display.
type dashboard struct {
	s        *train.Session
	id       string   // GoNB display id
	chartIDs []string // stable, so each update redraws the same charts
	n        int
	start    int // step count when training began
	started  time.Time
	last     time.Time
	updates  int
}

func trainCtx(ctx context.Context, s *train.Session, n int) (int, error) {
	d := &dashboard{s: s, id: newID("dashboard"), n: n, start: s.Trainer().StepCount(), started: now()}
	d.chartIDs = historyChartIDs()
	if isNotebook() {
		ensureLibrary()
	}
	d.update("starting", nil)
	done, err := s.Train(ctx, n, func(m train.Metrics) error {
		t := now()
		if t.Sub(d.last) >= UpdateInterval {
			d.update("training", nil)
		}
		return nil
	})
	state := "done"
	switch {
	case err != nil:
		state = "error"
	case done < n:
		state = "interrupted"
	}
	d.update(state, err)
	return done, err
}

func (d *dashboard) update(state string, err error) {
	d.last = now()
	d.updates++
	if isNotebook() {
		updateHTML(d.id, d.html(state, err))
		return
	}
	fmt.Fprintln(out, d.line(state, err))
}

func (d *dashboard) progress() (done int, eta time.Duration) {
	done = d.s.Trainer().StepCount() - d.start
	elapsed := d.last.Sub(d.started)
	if done > 0 && done < d.n {
		eta = time.Duration(float64(elapsed) / float64(done) * float64(d.n-done))
	}
	return done, eta
}

func (d *dashboard) line(state string, err error) string {
	done, eta := d.progress()
	h := d.s.Trainer().History
	s := fmt.Sprintf("[%s] %d/%d steps (step %d)", state, done, d.n, d.s.Trainer().StepCount())
	if len(h.Steps) > 0 {
		m := h.Last()
		s += fmt.Sprintf(" loss %s", num(m.Loss))
		if v := lastVal(h); v != nil {
			s += " val_loss " + num(*v)
		}
		s += fmt.Sprintf(" lr %.3g grad_norm %s %s tok/s", m.LR, num(m.GradNorm), numfmt.Thousands(int(m.TokensPerSec)))
	}
	if state == "training" && eta > 0 {
		s += " ETA " + eta.Round(time.Second).String()
	}
	if err != nil {
		s += " error: " + err.Error()
	}
	return s
}

func (d *dashboard) html(state string, err error) string {
	done, eta := d.progress()
	frac := 0.0
	if d.n > 0 {
		frac = float64(done) / float64(d.n)
	}
	color := map[string]string{"done": "#2b8a3e", "interrupted": "#e67700", "error": "#b00020"}[state]
	if color == "" {
		color = "#1971c2"
	}
	elapsed := d.last.Sub(d.started).Round(100 * time.Millisecond)
	var b strings.Builder
	fmt.Fprintf(&b, "<div class=\"forge-dashboard\" data-state=\"%s\" data-step=\"%d\">", state, d.s.Trainer().StepCount())
	fmt.Fprintf(&b, "<div style=\"display:flex;align-items:center;gap:10px;max-width:960px\"><div style=\"flex:1;background:#eee;border-radius:4px;height:14px\"><div class=\"forge-progress\" style=\"width:%.1f%%;background:%s;height:14px;border-radius:4px\"></div></div>", 100*frac, color)
	fmt.Fprintf(&b, "<span><b>%s</b> %d/%d steps · %s elapsed", html.EscapeString(state), done, d.n, elapsed)
	if state == "training" && eta > 0 {
		fmt.Fprintf(&b, " · ETA %s", eta.Round(time.Second))
	}
	b.WriteString("</span></div>")
	if err != nil {
		b.WriteString(errorHTML(err.Error()))
	}
	h := d.s.Trainer().History
	if len(h.Steps) > 0 {
		b.WriteString(metricsTable(h.Last(), lastVal(h)))
		b.WriteString(historyCharts(h, d.chartIDs))
	}
	b.WriteString("</div>")
	return box("Training "+d.s.Dir(), b.String())
}
