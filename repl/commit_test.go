package repl

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/fmodel"
	"github.com/forgeml/forge/forge/train"
)

// TestCommitAndOpenRepository: :commit writes the run's model to
// model.forge in the run; :open of that repository fine-tunes it in the
// run beside it, and :commit there adds a revision on top.
func TestCommitAndOpenRepository(t *testing.T) {
	s, out, dir := newTestSession(t)
	run := filepath.Join(dir, "r")
	script := ":new " + filepath.Join(dir, "micro.json") + " " + run + "\n:step 2\n:commit two steps\n"
	transcript(t, s, out, script, dir)
	repo := filepath.Join(run, train.RepositoryDir)
	r, err := fmodel.Open(repo)
	if err != nil {
		t.Fatal(err)
	}
	log, err := r.Log("")
	if err != nil || len(log) != 1 || log[0].Manifest.Message != "two steps" || log[0].Manifest.Meta["step"] != "2" {
		t.Fatalf("log after :commit: %+v %v", log, err)
	}
	tr := transcript(t, s, out, ":open "+repo+"\n:step 1\n:commit tuned\n:info\n", dir)
	if !strings.Contains(tr, "created $DIR/r/model.forge.run") || !strings.Contains(tr, "parent "+log[0].Hash[:12]) {
		t.Fatalf("transcript:\n%s", tr)
	}
	log, _ = r.Log("")
	if len(log) != 2 || log[0].Manifest.Message != "tuned" {
		t.Fatalf("log after the fine-tune's :commit: %+v", log)
	}
}
