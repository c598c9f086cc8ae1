package repl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forgeml/forge/configs"
	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
	"github.com/forgeml/forge/forge/nn"
	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
)

// command is one meta-command. Its args and doc drive :help, ?:name and
// completion; complete (optional) lists candidates for an argument.
type command struct {
	name     string
	args     string // "[n]"
	doc      string // one line
	more     string // further lines for :help name
	run      func(s *Session, ctx context.Context, args []string) error
	complete func(s *Session, args []string) []string // candidates for the last argument
}

var commands []command

func init() {
	commands = []command{
		{"open", "<dir>", "open (resume) the run in dir, or fine-tune a .forge repository; :new starts one",
			"A .forge repository (forge export --format forge) opens as the run <dir>.run beside it, started from the repository's\nweights and tokenizer; :commit saves a new revision back to it.", cmdOpen, completeDirs},
		{"new", "<config> [dir] [--data file…]", "create a run from a config (tiny, small, … or a .json file) in dir (default runs/<config>)",
			"The data is the built-in corpus unless --data names text files or a `forge prepare` directory.", cmdNew, completeConfigs},
		{"info", "", "the run: directory, config, model size, step, learning rate, latest losses", "", cmdInfo, nil},
		{"device", "[name]", "the device computing and why it was chosen, or move the session and its run to another", deviceDoc, cmdDevice, completeDevices},
		{"params", "[glob]", "the model's parameters (name, shape, count, share), those matching glob if given",
			"glob is a shell pattern where * crosses dots (blocks.*.attn.*), or a substring.", cmdParams, completeParams},
		{"inspect", "<param|expr>", "a tensor's shape, statistics, gradient statistics, histogram and values",
			"The argument is a parameter name (see :params) or a Go expression giving a *forge.Tensor.", cmdInspect, completeParams},
		{"step", "[n]", "train n steps (default 1), without a validation pass", "", cmdStep, nil},
		{"run", "<n> | until <cond> [--max n]", "train n steps, or until the Go condition holds (at most --max steps, default 10000)",
			"The condition sees step, loss, val_loss (the latest; NaN before the first), lr and grad_norm:\n  :run until loss < 4.5\n  :run until step >= 300 || val_loss < 4\nTraining computes a validation loss every eval_every steps and at the end. Ctrl-C stops at a step boundary; the run is saved either way.", cmdRun, nil},
		{"eval", "", "the validation loss and perplexity", "", cmdEval, nil},
		{"lr", "[value | schedule]", "show the learning rate, fix it to value, or return to the config's schedule", "", cmdLR, func(*Session, []string) []string { return []string{"schedule"} }},
		{"sample", "[-n 200] [-t 0.8] [-k 40] [-p 0.95] [--seed 1] [prompt…]", "continue the prompt with the model, streaming the tokens",
			"Without a prompt the text starts as after a line break (the tokenizers have no beginning-of-text token).\n\\n in the prompt is a line break, \\t a tab.", cmdSample, nil},
		{"plot", "<metric…> [--last n] [--browser]", "chart metrics over the steps: loss, val_loss, lr, grad_norm, tokens_per_sec, step_ms, loss_scale, memory, moe_aux, moe_load_max, moe_load_min",
			"--browser writes a self-contained HTML page (an SVG chart per metric) to the run's plots/ directory and opens it.", cmdPlot, completeMetrics},
		{"profile", "step | <go-expr>", "time every kernel of one training step (a real step of the run) or of a Go expression", "", cmdProfile,
			func(*Session, []string) []string { return []string{"step"} }},
		{"bench", "<kernel> [sizes…] | step [config] | <go-expr> [--budget 1s]", "time a kernel, a training step or a Go expression, %timeit style",
			"Kernels: " + kernelNames() + ".", cmdBench, completeBench},
		{"doctor", "[--out dir] [--short] [--no-timings]", "check the device against the CPU (kernels, conformance, a shadow training step, timings) and write a report",
			"The report file (markdown) goes to --out (default: the current directory); attach it to a bug report.", cmdDoctor, nil},
		{"prune", "<sparsity>", "mask the smallest-magnitude fraction of every Linear's weights (per layer) and save",
			"Sparsity is a fraction (0.5 prunes half of each layer). The masks are fixed: the pruned weights stay zero through training, checkpoints and resume; pruning again to a higher sparsity extends them.", cmdPrune, nil},
		{"save", "", "write a checkpoint of the run now", "", cmdSave, nil},
		{"commit", "[message]", "save the model as a new revision of its .forge repository (only changed tensors are written)",
			"The repository is the one the run was opened from, else model.forge inside the run directory.\nforge model log|inspect|verify read it; forge generate --run <repo> samples from it.", cmdCommit, nil},
		{"history", "[n] [-i]", "the last n training steps (default 10); -i: the last n inputs of this session", "", cmdHistory, nil},
		{"set", "[name [value]]", "show the settings, or set one: " + settingNames(), "", cmdSet, completeSettings},
		{"help", "[command]", "list the commands, or describe one", "", cmdHelp, completeCommands},
		{"quit", "", "leave (saves steps taken since the last save); Ctrl-D too", "", cmdQuit, nil},
	}
}

func findCommand(name string) (*command, error) {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i], nil
		}
	}
	var near []string
	for _, c := range commands {
		if strings.HasPrefix(c.name, name) {
			near = append(near, ":"+c.name)
		}
	}
	if len(near) == 1 {
		return findCommand(near[0][1:])
	}
	if len(near) > 1 {
		return nil, fmt.Errorf("ambiguous command :%s (%s)", name, strings.Join(near, ", "))
	}
	return nil, fmt.Errorf("unknown command :%s; :help lists them", name)
}

// command runs a meta-command line (without its colon).
func (s *Session) command(ctx context.Context, line string) error {
	name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	c, err := findCommand(name)
	if err != nil {
		return err
	}
	if err := c.run(s, ctx, fields(rest)); err != nil {
		var u usageError
		if errors.As(err, &u) {
			return fmt.Errorf("%s (usage: :%s %s)", u.msg, c.name, c.args)
		}
		return err
	}
	return nil
}

// usageError is an error in a command's arguments; the usage line follows it.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// fields splits arguments at spaces, keeping "quoted strings" together.
func fields(s string) []string {
	var out []string
	var cur strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && (quoted || !in):
			quoted = !quoted
			in = true
		case c == '\\' && quoted && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case (c == ' ' || c == '\t') && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// flagArgs separates "--name value" / "-n value" / "--switch" options from
// positional arguments. takesValue lists the options with a value.
func flagArgs(args []string, takesValue, switches []string) (opts map[string]string, pos []string, err error) {
	opts = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || len(a) < 2 || isNumber(a) {
			pos = append(pos, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(name, ""); ok && strings.Contains(v, "=") {
			k, val, _ := strings.Cut(v, "=")
			if !slices.Contains(takesValue, k) {
				return nil, nil, usagef("unknown option -%s", k)
			}
			opts[k] = val
			continue
		}
		switch {
		case slices.Contains(takesValue, name):
			if i+1 >= len(args) {
				return nil, nil, usagef("%s needs a value", a)
			}
			opts[name] = args[i+1]
			i++
		case slices.Contains(switches, name):
			opts[name] = "true"
		default:
			return nil, nil, usagef("unknown option %s", a)
		}
	}
	return opts, pos, nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func cmdOpen(s *Session, _ context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("name the run directory")
	}
	if !train.Exists(args[0]) && !train.IsRepository(args[0]) {
		return noRun(args[0])
	}
	return s.Open(args[0], "", nil)
}

func cmdCommit(s *Session, _ context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	st, err := s.run.Commit(strings.Join(args, " "))
	if err != nil {
		return err
	}
	parent := "the first revision"
	if st.Parent != "" {
		parent = "parent " + st.Parent[:12]
	}
	fmt.Fprintf(s.stdout, "committed step %d to %s as revision %s (%s): wrote %d of %d tensors and files, %s\n",
		s.run.Trainer().StepCount(), s.run.Repository(), st.Hash[:12], parent, st.Written, st.Written+st.Reused, numfmt.Bytes(float64(st.BytesWritten)))
	return nil
}

// noRun says that dir holds no run, naming the run beside it whose name
// is nearest (a typo) or the runs there, and how to start one.
func noRun(dir string) error {
	parent, base := filepath.Split(filepath.Clean(dir))
	if parent == "" {
		parent = "."
	}
	entries, _ := os.ReadDir(parent)
	var runs []string
	for _, e := range entries {
		if e.IsDir() && train.Exists(filepath.Join(parent, e.Name())) {
			runs = append(runs, e.Name())
		}
	}
	what := "no run"
	if _, err := os.Stat(dir); err == nil {
		what = "no run (no " + train.ConfigFile + ")"
	}
	msg := fmt.Sprintf("%s holds %s", dir, what)
	if near := nearest(base, runs); near != "" {
		msg += fmt.Sprintf("; did you mean %s?", filepath.Join(parent, near))
	} else if len(runs) > 0 {
		if len(runs) > 5 {
			runs = append(runs[:5], "…")
		}
		msg += fmt.Sprintf("; runs in %s: %s", filepath.Clean(parent), strings.Join(runs, ", "))
	}
	return fmt.Errorf("%s (:new <config> %s starts a run there)", msg, dir)
}

func cmdNew(s *Session, _ context.Context, args []string) error {
	var data []string
	var pos []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--data" || args[i] == "-data" {
			if i+1 >= len(args) {
				return usagef("--data needs a file")
			}
			data = append(data, args[i+1])
			i++
			continue
		}
		pos = append(pos, args[i])
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("name a config (%s) or a .json file", strings.Join(configs.Names(), ", "))
	}
	cfg, err := train.LoadConfig(pos[0])
	if err != nil {
		return err
	}
	dir := filepath.Join("runs", cfg.Name)
	if len(pos) == 2 {
		dir = pos[1]
	}
	if _, err := os.Stat(filepath.Join(dir, train.ConfigFile)); err == nil {
		return fmt.Errorf("%s already holds a run; :open %s resumes it, or name another directory", dir, dir)
	}
	return s.Open(dir, pos[0], data)
}

func cmdInfo(s *Session, _ context.Context, args []string) error {
	if len(args) > 0 {
		return usagef(":info takes no arguments")
	}
	if err := s.needRun(); err != nil {
		return err
	}
	r, tr := s.run, s.run.Trainer()
	c := r.Config()
	m := c.Model.Resolved()
	w := s.stdout
	fmt.Fprintf(w, "run       %s (config %s)\n", r.Dir(), c.Name)
	fmt.Fprintf(w, "model     %s parameters: vocab %d, context %d, d_model %d, %d layers, %d heads (%d kv), %s, %s\n",
		numfmt.Thousands(nn.Count(r.Model())), m.Vocab, m.Context, m.Dim, m.Layers, m.Heads, m.KVHeads, m.Norm, m.MLP)
	if m.MoE() {
		fmt.Fprintf(w, "          mixture of %d experts per block, top-%d per token (%s parameters active), aux coef %g\n",
			m.Experts, m.TopK, numfmt.Thousands(m.ActiveParams()), m.MoEAuxCoef)
	}
	if q := weightsLine(r.Model()); q != "" {
		fmt.Fprintf(w, "weights   %s\n", q)
	}
	fmt.Fprintf(w, "tokenizer %s, %d tokens\n", r.Tokenizer().Kind(), r.Tokenizer().VocabSize())
	fmt.Fprintf(w, "data      %s training and %s validation tokens; %d tokens per step (batch %d × context %d × accumulation %d)\n",
		numfmt.Thousands(r.TrainData().Tokens()), numfmt.Thousands(r.ValData().Tokens()), c.TokensPerStep(), c.Batch, m.Context, c.GradAccum)
	fmt.Fprintf(w, "memory    at least %s to train\n", c.MemoryNeeded())
	fmt.Fprintf(w, "training  step %d of %d, lr %.3e (%s)\n", tr.StepCount(), c.Steps, tr.LR(), lrSource(s))
	fmt.Fprintf(w, "optimizer %s\n", c.OptimizerSummary())
	for _, g := range tr.Opt.Describe() {
		fmt.Fprintf(w, "          %s\n", g)
	}
	// What the kernels run with: for the CPU the BLAS library, its kernels
	// and who chose them.
	fmt.Fprintf(w, "device    %s\n", forge.DefaultDevice().Describe())
	if h := tr.History.Steps; len(h) > 0 {
		last := h[len(h)-1]
		fmt.Fprintf(w, "losses    train %.4f at step %d", last.Loss, last.Step)
		if v := tr.History.LastVal(); v != nil {
			fmt.Fprintf(w, ", validation %.4f at step %d", *v.ValLoss, v.Step)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// weightsLine describes the model's fake quantisation and pruning masks
// ("" for neither).
func weightsLine(m *gpt.Model) string {
	var parts []string
	if q := m.Config.Quant; q != "" && q != forge.QuantNone {
		parts = append(parts, q+" fake-quantised block linears (embedding and head float32)")
	}
	masked, pruned, total := 0, 0.0, 0
	for _, l := range m.Linears() {
		if l.Layer.Mask != nil {
			masked++
			n := l.Layer.Weight.Numel()
			pruned += l.Layer.Sparsity() * float64(n)
			total += n
		}
	}
	if masked > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d linears masked, %.1f%% of their weights pruned", masked, len(m.Linears()), 100*pruned/float64(total)))
	}
	return strings.Join(parts, "; ")
}

func cmdPrune(s *Session, _ context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("give the sparsity, a fraction: :prune 0.5")
	}
	if err := s.needRun(); err != nil {
		return err
	}
	sp, err := strconv.ParseFloat(args[0], 64)
	if err != nil {
		return usagef("sparsity %q: want a fraction such as 0.5", args[0])
	}
	if err := s.run.PruneByMagnitude(sp); err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "pruned: %s; saved at step %d\n", weightsLine(s.run.Model()), s.run.Trainer().StepCount())
	return nil
}

func lrSource(s *Session) string {
	c := s.run.Config()
	fixed := c.LRSchedule().At(s.run.Trainer().StepCount()) != s.run.Trainer().LR()
	if fixed {
		return "fixed by :lr"
	}
	return fmt.Sprintf("%s schedule, peak %g, warmup %d", c.Schedule, c.LR, c.Warmup)
}

func cmdParams(s *Session, _ context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	if len(args) > 1 {
		return usagef("give at most one pattern")
	}
	var m nn.Module = s.run.Model()
	if len(args) == 1 {
		ps := nn.Match(s.run.Model(), args[0])
		if len(ps) == 0 {
			return fmt.Errorf("no parameter matches %q; :params lists them", args[0])
		}
		m = paramSubset{paramList(ps), s.run.Model()}
	}
	fmt.Fprint(s.stdout, nn.Summarize(m))
	return nil
}

// paramList is a Module of chosen parameters.
type paramList []nn.Param

func (p paramList) Params() []nn.Param { return p }

// paramSubset is chosen parameters of a model that lists its Linears, so
// that the summary still notes their quantisers and masks.
type paramSubset struct {
	paramList
	lin nn.LinearLister
}

func (p paramSubset) Linears() []nn.NamedLinear { return p.lin.Linears() }

func cmdInspect(s *Session, ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("name a parameter or give a Go expression")
	}
	src := strings.Join(args, " ")
	var t *forge.Tensor
	name := src
	if s.run != nil {
		if p, ok := nn.Find(s.run.Model(), src); ok {
			t = p
		}
	}
	if t == nil {
		g, err := s.interp()
		if err != nil {
			return err
		}
		if err := s.paramArgError(g, src); err != nil {
			return err
		}
		v, err := g.evalAs(ctx, src, src, nil)
		if err != nil {
			if s.run != nil && !strings.ContainsAny(src, "().") {
				return fmt.Errorf("%s is neither a parameter (see :params) nor a Go value: %v", src, err)
			}
			return err
		}
		var ok bool
		if t, ok = valueOf(v).(*forge.Tensor); !ok || t == nil {
			return fmt.Errorf("%s is %s, not a *forge.Tensor", src, typeName(v))
		}
	}
	s.inspect(name, t)
	return nil
}

func cmdEval(s *Session, ctx context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	if len(args) > 0 {
		return usagef(":eval takes no arguments")
	}
	start := time.Now()
	var loss float64
	var err error
	if perr := forge.Try(func() { loss, err = s.run.Trainer().Eval() }); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(s.stdout, "step %d: validation loss %.4f, perplexity %.2f (%s)\n", s.run.Trainer().StepCount(), loss, math.Exp(loss), since(start))
	return nil
}

func since(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func cmdLR(s *Session, _ context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	tr := s.run.Trainer()
	switch {
	case len(args) == 0:
	case len(args) == 1 && (args[0] == "schedule" || args[0] == "auto"):
		tr.SetLR(-1)
	case len(args) == 1:
		v, err := strconv.ParseFloat(args[0], 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return usagef("want a positive learning rate or 'schedule', got %q", args[0])
		}
		tr.SetLR(v)
	default:
		return usagef("give one value")
	}
	fmt.Fprintf(s.stdout, "lr %.3e (%s)\n", tr.LR(), lrSource(s))
	return nil
}

func cmdSave(s *Session, _ context.Context, args []string) error {
	if err := s.needRun(); err != nil {
		return err
	}
	if len(args) > 0 {
		return usagef(":save takes no arguments")
	}
	if err := s.run.Save(); err != nil {
		return err
	}
	s.savedStep = s.run.Trainer().StepCount()
	fmt.Fprintf(s.stdout, "saved step %d to %s\n", s.savedStep, s.run.Dir())
	return nil
}

func cmdHistory(s *Session, _ context.Context, args []string) error {
	opts, pos, err := flagArgs(args, nil, []string{"i"})
	if err != nil {
		return err
	}
	n := 10
	if len(pos) > 1 {
		return usagef("give one count")
	}
	if len(pos) == 1 {
		if n, err = strconv.Atoi(pos[0]); err != nil || n < 1 {
			return usagef("want a count >= 1, got %q", pos[0])
		}
	}
	if opts["i"] != "" {
		in := s.inputs[:len(s.inputs)-1] // not this :history
		first := max(0, len(in)-n)
		for i, l := range in[first:] {
			fmt.Fprintf(s.stdout, "%4d  %s\n", first+i+1, l)
		}
		return nil
	}
	if err := s.needRun(); err != nil {
		return err
	}
	h := s.run.Trainer().History.Steps
	if len(h) == 0 {
		fmt.Fprintln(s.stdout, "no steps yet: :step or :run trains")
		return nil
	}
	fmt.Fprintf(s.stdout, "%6s  %8s  %8s  %9s  %7s  %9s  %8s\n", "step", "loss", "val", "lr", "|g|", "tok/s", "ms")
	for _, m := range h[max(0, len(h)-n):] {
		val := "-"
		if m.ValLoss != nil {
			val = fmt.Sprintf("%.4f", *m.ValLoss)
		}
		fmt.Fprintf(s.stdout, "%6d  %8.4f  %8s  %9.3e  %7.3f  %9.0f  %8.1f\n", m.Step, m.Loss, val, m.LR, m.GradNorm, m.TokensPerSec, m.StepMS)
	}
	return nil
}

func cmdHelp(s *Session, _ context.Context, args []string) error {
	if len(args) > 1 {
		return usagef("name one command")
	}
	if len(args) == 1 {
		c, err := findCommand(strings.TrimPrefix(args[0], ":"))
		if err != nil {
			return err
		}
		fmt.Fprintf(s.stdout, ":%s %s\n  %s\n", c.name, c.args, c.doc)
		if c.more != "" {
			fmt.Fprintf(s.stdout, "  %s\n", strings.ReplaceAll(c.more, "\n", "\n  "))
		}
		return nil
	}
	const w = 26
	fmt.Fprintln(s.stdout, "commands (a unique prefix works too: :ru = :run):")
	for _, c := range commands {
		use := ":" + c.name + " " + c.args
		if len(use) > w {
			fmt.Fprintf(s.stdout, "  %s\n  %-*s  %s\n", use, w, "", c.doc)
		} else {
			fmt.Fprintf(s.stdout, "  %-*s  %s\n", w, use, c.doc)
		}
	}
	fmt.Fprint(s.stdout, `Go: anything else is Go, evaluated against the library (forge, nn, gpt, optim, train,
  tokenizer, data, configs, fmt, math, strings, …). model, tr and run are the open run;
  an expression's value prints and becomes ans; ctx is cancelled by Ctrl-C.
  ?name shows documentation (?forge.Randn, ?model.Generate, ?:run); Tab completes.
`)
	return nil
}

func cmdQuit(s *Session, _ context.Context, args []string) error {
	if len(args) > 0 {
		return usagef(":quit takes no arguments")
	}
	if err := s.saveIfNeeded(); err != nil {
		return err
	}
	return ErrQuit
}

// Settings.

type settings struct {
	width     int // 0: the terminal's
	precision int
	threshold int
	edgeitems int
	live      bool
	seed      uint64
	benchtime time.Duration
	tripwire  bool
}

func defaultSettings() settings {
	return settings{precision: 4, threshold: 1000, edgeitems: 3, live: true, seed: 1, benchtime: time.Second}
}

var settingDocs = []struct{ name, doc string }{
	{"width", "columns for tensors and charts (0: the terminal's)"},
	{"precision", "digits after the point when printing tensors"},
	{"threshold", "tensors with more elements print summarised"},
	{"edgeitems", "items shown at each end of a summarised axis"},
	{"live", "redraw a live line while training on a terminal (on/off)"},
	{"seed", "the default sampling seed of :sample"},
	{"benchtime", "the time :bench spends on each benchmark"},
	{"budget", "memory tensors may hold (8GiB, 512MiB; auto: the available RAM or the device's)"},
	{"tripwire", "stop at the first op whose output is NaN or ±Inf, naming it (on/off)"},
}

func settingNames() string {
	var n []string
	for _, d := range settingDocs {
		n = append(n, d.name)
	}
	return strings.Join(n, ", ")
}

func (st settings) get(name string) string {
	switch name {
	case "width":
		return strconv.Itoa(st.width)
	case "precision":
		return strconv.Itoa(st.precision)
	case "threshold":
		return strconv.Itoa(st.threshold)
	case "edgeitems":
		return strconv.Itoa(st.edgeitems)
	case "live":
		if st.live {
			return "on"
		}
		return "off"
	case "seed":
		return strconv.FormatUint(st.seed, 10)
	case "benchtime":
		return st.benchtime.String()
	case "budget":
		b, src := forge.MemoryBudget()
		if src == "set" {
			return numfmt.Bytes(float64(b))
		}
		if b == 0 {
			return "auto (none known)"
		}
		return "auto (" + numfmt.Bytes(float64(b)) + ", " + src + ")"
	case "tripwire":
		if st.tripwire {
			return "on"
		}
		return "off"
	}
	return ""
}

// parseBytes reads a memory size (numfmt.ParseBytes), or auto (0: the
// default budget).
func parseBytes(v string) (int64, error) {
	if v == "auto" || v == "0" {
		return 0, nil
	}
	n, err := numfmt.ParseBytes(v)
	if err != nil {
		return 0, usagef("budget wants a size (8GiB, 512MiB, 2G) or auto, got %q", v)
	}
	return n, nil
}

func cmdSet(s *Session, _ context.Context, args []string) error {
	st := &s.settings
	if len(args) == 0 {
		for _, d := range settingDocs {
			fmt.Fprintf(s.stdout, "  %-10s %-6s %s\n", d.name, st.get(d.name), d.doc)
		}
		return nil
	}
	name := args[0]
	if !slices.ContainsFunc(settingDocs, func(d struct{ name, doc string }) bool { return d.name == name }) {
		return usagef("no setting %q; choose %s", name, settingNames())
	}
	if len(args) == 1 {
		fmt.Fprintf(s.stdout, "%s %s\n", name, st.get(name))
		return nil
	}
	if len(args) > 2 {
		return usagef("give one value")
	}
	v := args[1]
	atoi := func(lo int) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo {
			return 0, usagef("%s wants an integer >= %d, got %q", name, lo, v)
		}
		return n, nil
	}
	var err error
	switch name {
	case "width":
		st.width, err = atoi(0)
	case "precision":
		st.precision, err = atoi(1)
	case "threshold":
		st.threshold, err = atoi(1)
	case "edgeitems":
		st.edgeitems, err = atoi(1)
	case "live":
		switch v {
		case "on", "true", "1":
			st.live = true
		case "off", "false", "0":
			st.live = false
		default:
			err = usagef("live wants on or off, got %q", v)
		}
	case "seed":
		st.seed, err = strconv.ParseUint(v, 10, 64)
		if err != nil {
			err = usagef("seed wants an unsigned integer, got %q", v)
		}
	case "benchtime":
		st.benchtime, err = time.ParseDuration(v)
		if err == nil && st.benchtime <= 0 || err != nil {
			st.benchtime = time.Second
			err = usagef("benchtime wants a positive duration (500ms, 2s), got %q", v)
		}
	case "budget":
		var b int64
		if b, err = parseBytes(v); err == nil {
			forge.SetMemoryBudget(b)
		}
	case "tripwire":
		switch v {
		case "on", "true", "1":
			st.tripwire = true
		case "off", "false", "0":
			st.tripwire = false
		default:
			err = usagef("tripwire wants on or off, got %q", v)
		}
		forge.SetTripwire(st.tripwire)
	}
	if err != nil {
		return err
	}
	forge.SetPrintOptions(forge.PrintOptions{Precision: st.precision, Threshold: st.threshold, EdgeItems: st.edgeitems})
	fmt.Fprintf(s.stdout, "%s %s\n", name, st.get(name))
	return nil
}
