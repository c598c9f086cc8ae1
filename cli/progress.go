package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/forgeml/forge/configs"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/termplot"
)

func configNames() []string { return configs.Names() }

// flagSet reports whether the flag called name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// progress draws one live line on a terminal (redrawn at most 10 times a
// second) or, on a pipe, a plain line every twentieth of the run.
type progress struct {
	w         io.Writer
	total     int
	done      int
	tty       bool
	quiet     bool
	start     time.Time
	lastDraw  time.Time
	every     int
	val       *float64
	lastWidth int
}

func newProgress(w io.Writer, total int, quiet bool) *progress {
	p := &progress{w: w, total: total, quiet: quiet, start: time.Now(), every: max(1, total/20)}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(m train.Metrics) error {
	p.done++
	if m.ValLoss != nil {
		p.val = m.ValLoss
	}
	if p.quiet {
		return nil
	}
	if p.tty {
		if time.Since(p.lastDraw) < 100*time.Millisecond && p.done < p.total {
			return nil
		}
		p.lastDraw = time.Now()
		line := p.line(m, true)
		pad := max(0, p.lastWidth-len(line))
		p.lastWidth = len(line)
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		return nil
	}
	if p.done%p.every == 0 || p.done == p.total || m.ValLoss != nil && p.done%p.every == 0 {
		fmt.Fprintln(p.w, p.line(m, false))
	}
	return nil
}

func (p *progress) line(m train.Metrics, bar bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d", m.Step)
	if bar {
		const width = 20
		n := width * p.done / max(1, p.total)
		fmt.Fprintf(&b, " [%s%s]", strings.Repeat("█", n), strings.Repeat("·", width-n))
	}
	fmt.Fprintf(&b, " %3.0f%%  loss %.4f", 100*float64(p.done)/float64(max(1, p.total)), m.Loss)
	if p.val != nil {
		fmt.Fprintf(&b, "  val %.4f", *p.val)
	}
	fmt.Fprintf(&b, "  lr %.2e  |g| %.2f  %s tok/s", m.LR, m.GradNorm, termplot.Kilo(m.TokensPerSec))
	if left := p.total - p.done; left > 0 {
		eta := time.Duration(float64(time.Since(p.start)) / float64(p.done) * float64(left))
		fmt.Fprintf(&b, "  ETA %s", eta.Round(time.Second))
	}
	return b.String()
}

func (p *progress) finish() {
	if p.tty && !p.quiet && p.done > 0 {
		fmt.Fprintln(p.w)
	}
}
