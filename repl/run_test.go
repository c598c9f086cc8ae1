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
