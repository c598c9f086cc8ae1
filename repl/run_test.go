package repl

import (
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
		":step\n")
	for _, want := range []string{
		"error: run.Model cannot be replaced: a run keeps its model, trainer, config and data together (run.Model() reads it); to train another model, start a run with :new\n",
		"error: r.Trainer cannot be replaced",
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
