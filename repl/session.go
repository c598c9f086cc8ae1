package repl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/optim"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
)

// Sentinel errors for control flow.
var (
	// ErrContinue: the input is incomplete Go (an open bracket or string);
	// send it again with the next line appended.
	ErrContinue = errors.New("repl: the input continues on the next line")
	// ErrQuit: the user asked to leave.
	ErrQuit = errors.New("repl: quit")
)

// Options configure a Session. The zero value suits a pipe.
type Options struct {
	// Width returns the terminal's width in columns (nil or ≤ 0: 80).
	Width func() int
	// Live redraws one status line while training (a terminal); otherwise
	// training commands print only their summary.
	Live bool
	// OpenBrowser opens a file:// URL for :plot --browser (nil: the
	// system's browser through github.com/cli/browser). An error makes
	// :plot print the path instead.
	OpenBrowser func(url string) error
	// Log receives the progress of opening a run (tokenizer training,
	// encoding); nil: the session's stderr.
	Log io.Writer
}

// Session is one REPL: the open run, the Go interpreter and the settings.
// It is not safe for concurrent use; Complete may be called between
// evaluations.
type Session struct {
	stdout, stderr io.Writer
	opts           Options

	run       *train.Session // nil until :open or :new
	savedStep int            // the step of the run's last checkpoint we know of

	goi *goEval // the Go interpreter, made on first use

	inputs   []string // complete inputs, for :history -i
	settings settings
}

// NewSession returns a session writing results to stdout and progress and
// errors to stderr, with no run open.
func NewSession(stdout, stderr io.Writer, opts Options) (*Session, error) {
	s := &Session{stdout: stdout, stderr: stderr, opts: opts, settings: defaultSettings()}
	return s, nil
}

// width is the terminal width for printing, per the setting or Options.
func (s *Session) width() int {
	if s.settings.width > 0 {
		return s.settings.width
	}
	if s.opts.Width != nil {
		if w := s.opts.Width(); w > 0 {
			return w
		}
	}
	return 80
}

// Run returns the open run (nil if none).
func (s *Session) Run() *train.Session { return s.run }

// Close releases the open run without saving (training commands save as
// they finish; :quit saves unsaved steps).
func (s *Session) Close() error {
	if s.run == nil {
		return nil
	}
	err := s.run.Close()
	s.run = nil
	return err
}

// Eval evaluates one complete input: a meta-command, a ?documentation
// request or Go. See EvalContext.
func (s *Session) Eval(in string) error { return s.EvalContext(context.Background(), in) }

// EvalContext is Eval whose work stops at a safe point when ctx is
// cancelled (Ctrl-C).
func (s *Session) EvalContext(ctx context.Context, in string) (err error) {
	src := strings.TrimSpace(in)
	if src == "" || strings.HasPrefix(src, "#") { // # starts a comment line in scripts
		return nil
	}
	isGo := !strings.HasPrefix(src, ":") && !strings.HasPrefix(src, "?")
	if isGo && incomplete(src) {
		return ErrContinue
	}
	s.inputs = append(s.inputs, flatten(src))
	forge.SetPrintOptions(forge.PrintOptions{LineWidth: s.width()})
	// A panic in a command or in the library is an error, not the end.
	defer func() {
		if r := recover(); r != nil {
			err = panicError(r)
		}
		err = s.nameTripInput(err, src)
	}()
	switch {
	case strings.HasPrefix(src, ":"):
		return s.command(ctx, src[1:])
	case strings.HasPrefix(src, "?"):
		return s.doc(strings.TrimSpace(src[1:]))
	}
	if s.run == nil {
		return s.evalGo(ctx, src)
	}
	tr := s.run.Trainer()
	m, opt := tr.Model, tr.Opt
	err = s.evalGo(ctx, src)
	return keepTrainer(tr, m, opt, err)
}

// keepTrainer puts back the run's model and optimizer if Go code replaced
// them on its trainer (tr.Model = m2): the run saves, samples and reports
// its own model, so a trainer stepping another one would desynchronise it.
func keepTrainer(tr *train.Trainer, m *gpt.Model, opt optim.Optimizer, err error) error {
	var field string
	switch {
	case tr.Model != m:
		field = "Model"
	case tr.Opt != opt:
		field = "Opt"
	default:
		return err
	}
	tr.Model, tr.Opt = m, opt
	return fmt.Errorf("tr.%s cannot be replaced: the run's trainer steps the run's own model and optimizer (put back); to train another model, start a run with :new", field)
}

// nameTripInput adds to an error of the NaN tripwire (:set tripwire on)
// the input that ran into it; other errors pass unchanged.
func (s *Session) nameTripInput(err error, src string) error {
	var fe *forge.Error
	var te *train.TripwireError
	if !(errors.As(err, &fe) && fe.Trip != nil) && !errors.As(err, &te) {
		return err
	}
	in := flatten(src)
	if r := []rune(in); len(r) > 60 {
		in = string(r[:57]) + "..."
	}
	return fmt.Errorf("%w (input %d: %s)", err, len(s.inputs), in)
}

// panicError turns a recovered value into an error naming it a panic
// (forge's misuse errors keep their own message).
func panicError(r any) error {
	switch e := r.(type) {
	case *forge.Error:
		return e
	case error:
		return fmt.Errorf("panic: %w", e)
	}
	return fmt.Errorf("panic: %v", r)
}

// flatten joins a multi-line input into one history entry.
func flatten(src string) string {
	lines := strings.Split(src, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}

// OneLine formats an error as the single line the loop prints.
func OneLine(err error) string {
	s := strings.TrimSpace(err.Error())
	if i := strings.Index(s, "\ngoroutine "); i >= 0 {
		s = s[:i]
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// errNoRun is returned by commands that need an open run.
var errNoRun = errors.New("no run is open: :open <dir> resumes one, :new <config> [dir] starts one")

func (s *Session) needRun() error {
	if s.run == nil {
		return errNoRun
	}
	return nil
}

// Open opens the run in dir, creating it with config (a name from configs
// or a .json file; "" means tiny) on the texts of dataFiles (none: the
// built-in corpus) if dir holds no run yet. A directory of `forge prepare`
// as the one data file is used as prepared token files.
func (s *Session) Open(dir, config string, dataFiles []string) error {
	opts := train.OpenOptions{ConfigName: config, DefaultConfigName: "tiny", Log: s.opts.Log, Data: dataFiles}
	if opts.Log == nil {
		opts.Log = s.stderr
	}
	runDir := dir
	if train.IsRepository(dir) {
		runDir = train.RunDirOf(dir)
	}
	if s.run != nil && sameDir(s.run.Dir(), runDir) {
		s.Close() // the run holds its directory's lock: reopening it needs it back
	}
	r, err := train.Open(dir, opts)
	if err != nil {
		return err
	}
	s.Close()
	s.run = r
	s.savedStep = r.Trainer().StepCount()
	if s.goi != nil {
		if err := s.goi.bind(s); err != nil {
			return err
		}
	}
	verb := "created"
	if r.Resumed() {
		verb = "resumed"
	}
	fmt.Fprintf(s.stdout, "%s %s: %s, %s parameters, step %d of %d", verb, r.Dir(), r.Config().Name,
		numfmt.Thousands(nn.Count(r.Model())), r.Trainer().StepCount(), r.Config().Steps)
	if h := r.Trainer().History.Steps; len(h) > 0 {
		fmt.Fprintf(s.stdout, ", loss %.4f", h[len(h)-1].Loss)
	}
	fmt.Fprintln(s.stdout)
	if why := r.FellBack(); why != "" {
		fmt.Fprintf(s.stderr, "note: %s\n", why)
	}
	return nil
}

// saveIfNeeded saves the run when steps were taken since the last save
// (from Go, say).
func (s *Session) saveIfNeeded() error {
	if s.run == nil || s.run.Trainer().StepCount() == s.savedStep {
		return nil
	}
	if err := s.run.Save(); err != nil {
		return err
	}
	s.savedStep = s.run.Trainer().StepCount()
	fmt.Fprintf(s.stdout, "saved step %d to %s\n", s.savedStep, s.run.Dir())
	return nil
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
