package repl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chzyer/readline"
)

var contextBackground = context.Background()

// unfinished is the error of Go input that ends with brackets open.
func (s *Session) unfinished(in string) error {
	s.inputs = append(s.inputs, flatten(in))
	return fmt.Errorf("syntax error: unfinished Go input %q (a bracket or string is still open)", flatten(in))
}

// Prompts.
const (
	Prompt     = "forge> "
	MorePrompt = "  ...> "
)

// ErrInputFailed is returned by RunLines when at least one input failed.
var ErrInputFailed = errors.New("repl: an input failed")

// feeder accumulates lines into complete inputs and evaluates them.
type feeder struct {
	s       *Session
	pending []string
	failed  bool
	// numbered: a script's errors start with the line its input began on.
	numbered bool
	n, start int // lines read; the line the pending input began on
}

// report prints an input's error, after the line it began on in a script.
func (f *feeder) report(err error, line int) {
	f.failed = true
	if f.numbered {
		fmt.Fprintf(f.s.stderr, "line %d: ", line)
	}
	fmt.Fprintf(f.s.stderr, "error: %s\n", OneLine(err))
}

// line takes one line; it reports whether the session should end.
func (f *feeder) line(ctx context.Context, line string) (quit bool, complete bool) {
	f.n++
	// A blank line or a meta-command ends an unfinished Go input: it is
	// evaluated as it stands (and reports its error).
	if t := strings.TrimSpace(line); len(f.pending) > 0 && (t == "" || strings.HasPrefix(t, ":")) {
		in := strings.Join(f.pending, "\n")
		f.pending = nil
		f.report(f.s.unfinished(in), f.start)
		if t == "" {
			return false, true
		}
	}
	if len(f.pending) == 0 {
		f.start = f.n
	}
	f.pending = append(f.pending, line)
	in := strings.Join(f.pending, "\n")
	err := f.s.EvalContext(ctx, in)
	if errors.Is(err, ErrContinue) {
		return false, false
	}
	f.pending = nil
	switch {
	case err == nil:
	case errors.Is(err, ErrQuit):
		return true, true
	default:
		f.report(err, f.start)
	}
	return false, true
}

// RunLines evaluates the inputs read from r, one line at a time (lines
// continue while Go brackets are open), printing each error as one line
// that starts with the line its input began on ("line 3: error: …") and
// going on, until EOF or :quit; it then saves steps taken since the
// last save. Ctrl-C (SIGINT) interrupts the running input only. It
// returns ErrInputFailed if an input failed. When r is a file (the
// process's stdin), it first says on stderr, in one line, why it reads
// plain lines: the input, or the output, is not a terminal.
func (s *Session) RunLines(r io.Reader) error {
	if why := notTerminal(r, s.stdout); why != "" && !restarted {
		fmt.Fprintf(s.stderr, "forge repl: reading plain lines because %s: no banner, no prompt, no completion; errors name their line\n", why)
	}
	if _, ok := r.(*os.File); ok && os.Getenv(ChildEnv) != "" {
		r = byteReader{r} // the next child, if this one dies, reads on from the next line
	}
	f := &feeder{s: s, numbered: true}
	s.reportState()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var quit bool
		interruptible(s, func(ctx context.Context) { quit, _ = f.line(ctx, sc.Text()) })
		s.reportState()
		if quit {
			return f.result()
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(f.pending) > 0 {
		f.report(s.unfinished(strings.Join(f.pending, "\n")), f.start)
	}
	if err := s.saveIfNeeded(); err != nil {
		fmt.Fprintf(s.stderr, "error: %s\n", OneLine(err))
		f.failed = true
	}
	return f.result()
}

// notTerminal says why a process reading r and writing w is not at a
// terminal ("" when r is no file of the process, such as a string in a
// test, or both are terminals).
func notTerminal(r io.Reader, w io.Writer) string {
	in, ok := r.(*os.File)
	if !ok {
		return ""
	}
	if !IsTerminal(in) {
		return "input is not a terminal"
	}
	if out, ok := w.(*os.File); ok && !IsTerminal(out) {
		return "output is not a terminal"
	}
	return ""
}

func (f *feeder) result() error {
	if f.failed {
		return ErrInputFailed
	}
	return nil
}

// leaveWait is how long a second Ctrl-C waits for the input, already told
// to stop, to end its step in flight before the REPL leaves unsaved.
var leaveWait = 10 * time.Second

// interruptible runs fn with a context cancelled by the first Ctrl-C. A
// second Ctrl-C during the same input leaves the REPL, but safely: fn
// (training stops between steps) has leaveWait to return, then the steps
// since the last save are saved by the goroutine that ran fn — never
// while a step runs — and the process exits with status 130. A third Ctrl-C, or fn
// not returning in time, leaves at once without saving, saying so.
func interruptible(s *Session, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 3)
	signal.Notify(ch, os.Interrupt)
	done := make(chan struct{})
	var mu sync.Mutex
	finished, leaving := false, false
	go func() {
		var late <-chan time.Time
		n := 0
		for {
			select {
			case <-ch:
				switch n++; n {
				case 1:
					cancel()
				case 2:
					mu.Lock()
					if finished { // fn has returned: nothing runs any more
						mu.Unlock()
						return
					}
					leaving = true
					mu.Unlock()
					fmt.Fprintln(s.stderr, "\ninterrupted twice: saving once the step in flight ends (Ctrl-C again leaves without saving)")
					late = time.After(leaveWait)
				default:
					fmt.Fprintln(s.stderr, "\ninterrupted three times: leaving without saving")
					os.Exit(130)
				}
			case <-late:
				fmt.Fprintf(s.stderr, "\ninterrupted twice: the input did not stop in %s; leaving without saving\n", leaveWait)
				os.Exit(130)
			case <-done:
				mu.Lock()
				l := leaving
				mu.Unlock()
				if !l {
					return
				}
				done, late = nil, nil // fn is done: keep watching for Ctrl-C while saving
			}
		}
	}()
	fn(ctx)
	mu.Lock()
	finished = true
	l := leaving
	mu.Unlock()
	close(done)
	if l {
		fmt.Fprintf(s.stderr, "interrupted twice: %s, leaving\n", s.saveLeaving())
		os.Exit(130)
	}
	signal.Stop(ch)
	cancel()
}

// saveLeaving saves the steps since the last save, for leaving the REPL,
// and says what was saved.
func (s *Session) saveLeaving() string {
	if s.run == nil {
		return "no run open"
	}
	if s.run.Trainer().StepCount() != s.savedStep {
		if err := s.run.Save(); err != nil {
			return "not saved: " + OneLine(err)
		}
		s.savedStep = s.run.Trainer().StepCount()
	}
	return fmt.Sprintf("saved step %d", s.savedStep)
}

// TerminalOptions configure RunTerminal.
type TerminalOptions struct {
	Stdin          *os.File
	Stdout, Stderr io.Writer
	// HistoryFile keeps one line per complete input ("" : none).
	HistoryFile string
}

// DefaultHistoryFile is ~/.forge/history.
func DefaultHistoryFile() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".forge", "history")
}

// TerminalWidth returns the width of the terminal on stdout (80 if it is
// not a terminal).
func TerminalWidth() int {
	if w := readline.GetScreenWidth(); w > 0 {
		return w
	}
	return 80
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return readline.IsTerminal(int(f.Fd())) }

// RunTerminal reads inputs with line editing, history (Ctrl-R searches
// it) and Tab completion until Ctrl-D or :quit. Ctrl-C at the prompt
// clears the line; during an input it interrupts that input at a safe
// point and the prompt returns.
func (s *Session) RunTerminal(opts TerminalOptions) error {
	if opts.HistoryFile != "" {
		if err := os.MkdirAll(filepath.Dir(opts.HistoryFile), 0o755); err != nil {
			fmt.Fprintf(s.stderr, "note: no history (%v)\n", err)
			opts.HistoryFile = ""
		}
	}
	rl, err := readline.NewEx(&readline.Config{
		Prompt:                 Prompt,
		HistoryFile:            opts.HistoryFile,
		DisableAutoSaveHistory: true,
		HistorySearchFold:      true,
		AutoComplete:           completer{s},
		InterruptPrompt:        "^C",
		EOFPrompt:              "",
		FuncGetWidth:           TerminalWidth,
		Stdin:                  opts.Stdin,
		Stdout:                 opts.Stdout,
		Stderr:                 opts.Stderr,
	})
	if err != nil {
		return err
	}
	defer rl.Close()
	f := &feeder{s: s}
	s.reportState()
	for {
		line, err := rl.Readline()
		switch {
		case errors.Is(err, readline.ErrInterrupt):
			f.pending = nil
			rl.SetPrompt(Prompt)
			continue
		case errors.Is(err, io.EOF):
			fmt.Fprintln(s.stdout)
			return s.saveIfNeeded()
		case err != nil:
			return err
		}
		var quit, complete bool
		n := len(s.inputs)
		interruptible(s, func(ctx context.Context) { quit, complete = f.line(ctx, line) })
		s.reportState()
		if len(s.inputs) > n { // one history entry per complete input
			_ = rl.SaveHistory(s.inputs[len(s.inputs)-1])
		}
		if quit {
			return nil
		}
		if complete {
			rl.SetPrompt(Prompt)
		} else {
			rl.SetPrompt(MorePrompt)
		}
	}
}

// completer adapts Session.Complete to readline.
type completer struct{ s *Session }

func (c completer) Do(line []rune, pos int) ([][]rune, int) {
	text := string(line[:pos])
	cands, word := c.s.Complete(text, len(text))
	out := make([][]rune, len(cands))
	for i, cand := range cands {
		out[i] = []rune(cand[len(word):])
	}
	return out, len([]rune(word))
}
