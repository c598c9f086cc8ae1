package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestModelRepository is the .forge workflow from the command line:
// export a run twice (the second commit writes only what changed: nothing
// but the new step's tensors), read the repository with generate, eval,
// info, log, inspect and verify, check out the older revision, convert to
// safetensors, and refuse what does not make sense with one line.
func TestModelRepository(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	runDir := filepath.Join(dir, "run")
	if r := runCLI("train", "--config", config, "--run", runDir, "--data", text, "--steps", "2"); r.code != 0 {
		t.Fatalf("train: %+v", r)
	}
	repo := filepath.Join(dir, "m.forge")
	r := runCLI("export", "--run", runDir, "--out", repo, "--format", "forge", "--message", "two steps")
	if r.code != 0 || !strings.Contains(r.stdout, "a new repository") {
		t.Fatalf("export --format forge: %+v", r)
	}
	// Exporting the same step again writes no tensor.
	if r := runCLI("export", "--run", runDir, "--out", repo, "--format", "forge"); r.code != 0 || !strings.Contains(r.stdout, "wrote 0 new blob(s)") {
		t.Fatalf("second export of the same step: %+v", r)
	}
	if r := runCLI("train", "--run", runDir, "--steps", "1"); r.code != 0 {
		t.Fatalf("train: %+v", r)
	}
	if r := runCLI("export", "--run", runDir, "--out", repo, "--format", "forge", "--dtype", "bfloat16"); r.code != 0 {
		t.Fatalf("bfloat16 export: %+v", r)
	}
	log := runCLI("model", "log", repo)
	if log.code != 0 || strings.Count(log.stdout, "\n") != 3 || !strings.Contains(log.stdout, "two steps") || !strings.HasPrefix(log.stdout, "* ") {
		t.Fatalf("log: %+v", log)
	}
	first := regexp.MustCompile(`([0-9a-f]{12})  .*two steps`).FindStringSubmatch(log.stdout)[1]
	if r := runCLI("model", "inspect", repo); r.code != 0 || !strings.Contains(r.stdout, "BF16") || !strings.Contains(r.stdout, "wte.weight") || !strings.Contains(r.stdout, "step: 3") {
		t.Errorf("inspect: %+v", r)
	}
	if r := runCLI("model", "verify", repo); r.code != 0 || !strings.Contains(r.stdout, "ok") {
		t.Errorf("verify: %+v", r)
	}
	if r := runCLI("generate", "--run", repo, "--prompt", "Emma", "-n", "8", "--temperature", "0"); r.code != 0 || !strings.HasPrefix(r.stdout, "Emma") {
		t.Errorf("generate from a repository: %+v", r)
	}
	a := runCLI("generate", "--run", repo, "--rev", first, "-n", "8", "--temperature", "0")
	b := runCLI("generate", "--run", runDir, "-n", "8", "--temperature", "0")
	if a.code != 0 || b.code != 0 {
		t.Fatalf("generate: %+v %+v", a, b)
	}
	val := filepath.Join(runDir, "data", "val.bin")
	if r := runCLI("eval", "--run", repo, "--rev", "HEAD~2", "--data", val); r.code != 0 || !strings.Contains(r.stdout, "step 2: validation loss") {
		t.Errorf("eval of HEAD~2: %+v", r)
	}
	if r := runCLI("eval", "--run", repo); r.code != 2 || !strings.Contains(r.stderr, "--data val.bin") {
		t.Errorf("eval of a repository without --data: %+v", r)
	}
	if r := runCLI("info", "--run", repo); r.code != 0 || !strings.Contains(r.stdout, "repository") || !strings.Contains(r.stdout, "parameters:") {
		t.Errorf("info: %+v", r)
	}
	if r := runCLI("model", "checkout", repo, first); r.code != 0 || !strings.Contains(r.stdout, "HEAD is now "+first) {
		t.Errorf("checkout: %+v", r)
	}
	if r := runCLI("generate", "--run", repo, "-n", "8", "--temperature", "0"); r.stdout != a.stdout {
		t.Errorf("after checkout, HEAD samples %q, want the first revision's %q", r.stdout, a.stdout)
	}
	out := filepath.Join(dir, "hf")
	if r := runCLI("model", "to-safetensors", repo, out); r.code != 0 {
		t.Errorf("to-safetensors: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(out, "model.safetensors")); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"model"}, 2, "needs a subcommand"},
		{[]string{"model", "frob", repo}, 2, "no such subcommand"},
		{[]string{"model", "log", filepath.Join(dir, "none")}, 1, "no such repository"},
		{[]string{"model", "log", runDir}, 1, "not a .forge repository"},
		{[]string{"model", "checkout", repo, "ffffffff"}, 1, "has no revision"},
		{[]string{"generate", "--run", runDir, "--rev", "HEAD~1"}, 2, "not a .forge repository"},
		{[]string{"export", "--run", runDir, "--out", repo, "--format", "onnx"}, 2, "--format"},
		{[]string{"export", "--run", runDir, "--out", repo, "--format", "forge", "--dtype", "int8"}, 1, "want float32"},
		{[]string{"export", "--run", runDir, "--out", out + "2", "--dtype", "float16"}, 2, "belong to --format forge"},
	} {
		r := runCLI(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("forge %s: exit %d, stderr %q; want exit %d and one line with %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}
