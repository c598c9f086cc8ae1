package notebook

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge/train"
)

// TestOpenRepository: a cell opening a .forge repository trains its model
// in the run beside it and commits back to it.
func TestOpenRepository(t *testing.T) {
	dir := t.TempDir()
	s := testSession(t, filepath.Join(dir, "base"))
	repo := filepath.Join(dir, "m.forge")
	st, err := train.CommitModel(repo, s.Model(), s.Tokenizer(), s.Config(), 0, train.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := open(repo, train.OpenOptions{Texts: []string{"It is a truth universally acknowledged, that a single man"}, Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Dir() != train.RunDirOf(repo) {
		t.Fatalf("run directory %s", r.Dir())
	}
	if !slices.Equal(r.Model().Wte.Weight.Float32s(), s.Model().Wte.Weight.Float32s()) {
		t.Fatal("the run does not start from the repository's weights")
	}
	c, err := r.Commit("from a cell")
	if err != nil || c.Parent != st.Hash {
		t.Fatalf("commit: %+v %v", c, err)
	}
}
