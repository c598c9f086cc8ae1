package repl

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneInfoParams: :prune masks every Linear, :info says so, :params
// shows each weight's mask, and a bad sparsity is refused.
func TestPruneInfoParams(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, out, dir := newTestSession(t)
	got := transcript(t, s, out, ":new "+filepath.Join(dir, "micro.json")+" "+filepath.Join(dir, "run")+
		"\n:prune 0.25\n:info\n:params blocks.0.attn.wo\n:prune 2\n:prune", dir)
	for _, want := range []string{
		"pruned: ",
		"weights 10 of 10 linears masked",
		"linears masked, #.#% of their weights pruned",
		"blocks.0.attn.wo.weight",
		"mask #.#%",
		"sparsity 2: want a fraction in [0, 1]",
		"give the sparsity, a fraction: :prune",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("transcript lacks %q:\n%s", want, got)
		}
	}
}
