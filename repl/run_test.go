package repl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runTranscript runs script (with $DIR for the session's directory) in a
// new session and returns its transcript.
func runTranscript(t *testing.T, script string) (got, dir string, s *Session) {
	t.Helper()
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, out, dir := newTestSession(t)
	return transcript(t, s, out, strings.ReplaceAll(script, "$DIR", dir), dir), dir, s
}

// The run's model, trainer, config and data cannot be replaced behind the
// session's back: an assignment is refused in the user's terms, and the
// session goes on training the model it saves.
func TestRunFieldsReadOnly(t *testing.T) {
	got, _, s := runTranscript(t, ":new $DIR/micro.json $DIR/run\n"+
		"m2, _ := gpt.New(run.Config().Model, 7)\n"+
		"run.Model = m2\n"+
		"r := run\n"+
		"r.Trainer = nil\n"+
		"tr.Model = m2\n"+
		"opt := tr.Opt\n"+
		"tr.Opt = nil\n"+
		"tr.Opt == opt\n"+
		":step\n")
	for _, want := range []string{
		"error: run.Model cannot be replaced: a run keeps its model, trainer, config and data together (run.Model() reads it); to train another model, start a run with :new\n",
		"error: r.Trainer cannot be replaced",
		"error: tr.Model cannot be replaced: the run's trainer steps the run's own model and optimizer (put back); to train another model, start a run with :new\n",
		"error: tr.Opt cannot be replaced",
		"tr.Opt == opt\ntrue\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "func(") {
		t.Errorf("an interpreter type leaks:\n%s", got)
	}
	if s.run.Trainer().Model != s.run.Model() || s.run.Trainer().StepCount() != 1 {
		t.Errorf("the trainer trains another model than the run's, or did not step:\n%s", got)
	}
}

// Constant arguments of variadic library methods reach the right
// parameters (the interpreter alone converts run.Train(ctx, 2)'s 2 to a
// train.Callback), and fmt's Sprint functions print their value.
func TestVariadicCalls(t *testing.T) {
	got, _, s := runTranscript(t, ":new $DIR/micro.json $DIR/run\n"+
		"run.Train(ctx, 2)\n"+
		"run.TrainWith(ctx, 4-3, train.RunOptions{NoEval: true}, func(m train.Metrics) error { return nil })\n"+
		"run.Train(ctx, \"x\")\n"+
		"fmt.Sprint(1, 2)\n")
	for _, want := range []string{
		"forge> run.Train(ctx, 2)\n2\n",
		"error: cannot convert \"x\" to int: run.Train takes (context.Context, int, ...train.Callback)",
		"forge> fmt.Sprint(1, 2)\n\"1 2\"\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q:\n%s", want, got)
		}
	}
	if n := s.run.Trainer().StepCount(); n != 3 {
		t.Errorf("the run is at step %d after Train(2) and TrainWith(1), want 3:\n%s", n, got)
	}
}

// :open opens existing runs only: a typo names the nearest run beside it,
// and a folder that holds no run is left as it was.
func TestOpenExistingOnly(t *testing.T) {
	got, dir, s := runTranscript(t, ":new $DIR/micro.json $DIR/runs/mini\n"+
		":new $DIR/micro.json $DIR/runs/other\n"+
		":open $DIR/runs/mnii\n"+
		":open $DIR\n"+
		":open $DIR/runs/far-away-name\n"+
		":open $DIR/runs/mini\n")
	for _, want := range []string{
		"forge> :open $DIR/runs/mnii\nerror: $DIR/runs/mnii holds no run; did you mean $DIR/runs/mini? (:new <config> $DIR/runs/mnii starts a run there)\n",
		"forge> :open $DIR\nerror: $DIR holds no run (no config.json) (:new <config> $DIR starts a run there)\n",
		"error: $DIR/runs/far-away-name holds no run; runs in $DIR/runs: mini, other (",
		"forge> :open $DIR/runs/mini\nresumed $DIR/runs/mini",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q:\n%s", want, got)
		}
	}
	for _, d := range []string{"runs/mnii", "runs/far-away-name", "config.json", "data"} {
		if _, err := os.Stat(filepath.Join(dir, d)); err == nil {
			t.Errorf(":open created %s", d)
		}
	}
	if s.run == nil || !strings.HasSuffix(s.run.Dir(), "runs/mini") {
		t.Errorf("the open run is not runs/mini:\n%s", got)
	}
}

// The prompt of :sample is optional, as :help shows: without one the text
// continues a line break, token for token as the prompt \n does.
func TestSampleWithoutPrompt(t *testing.T) {
	s, out, _ := newTestSession(t)
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	dir := t.TempDir()
	f := &feeder{s: s}
	run := func(in string) string {
		t.Helper()
		out.Reset()
		f.line(t.Context(), in)
		if strings.Contains(out.String(), "error:") {
			t.Fatalf("%s: %s", in, out)
		}
		return out.String()
	}
	run(":new testdata/micro.json " + filepath.Join(dir, "run"))
	help := run(":help sample")
	if !strings.Contains(help, "[prompt…]") || !strings.Contains(help, "Without a prompt") {
		t.Errorf(":help sample does not show the prompt as optional:\n%s", help)
	}
	bare := run(":sample -n 12 --seed 5")
	newline := run(`:sample -n 12 --seed 5 \n`)
	if !strings.Contains(bare, "(12 tokens in ") {
		t.Errorf(":sample without a prompt did not stream 12 tokens:\n%s", bare)
	}
	text := func(s string) string { return s[:strings.LastIndex(s, "(12 tokens")] }
	if "\n"+text(bare) != text(newline) {
		t.Errorf(":sample without a prompt gave\n%q\nand with the prompt \\n\n%q", text(bare), text(newline))
	}
}
