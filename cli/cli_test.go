package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
)

func TestDemo(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(nil, &out, &errb); code != 0 {
		t.Fatalf("demo exited %d: %s", code, errb.String())
	}
	s := out.String()
	for _, want := range []string{"tensor([[0., 1., 2.],", "w.Grad() = tensor(", "loss = ", "step 300  loss "} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// micro writes a fast config and a text file into dir.
func micro(t *testing.T, dir string) (config, text string) {
	t.Helper()
	config = filepath.Join(dir, "micro.json")
	os.WriteFile(config, []byte(`{"name": "micro",
	  "model": {"vocab": 300, "context": 32, "d_model": 32, "n_layer": 2, "n_head": 2},
	  "batch": 4, "steps": 6, "warmup": 2, "eval_every": 3, "eval_batches": 2, "save_every": 0}`), 0o644)
	text = filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(data.Austen()[:50000]), 0o644)
	return config, text
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(args ...string) result {
	var out, errb bytes.Buffer
	code := run(&env{stdout: &out, stderr: &errb}, args)
	return result{code, out.String(), errb.String()}
}

func TestTrainResumeGenerateEvalExport(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	runDir := filepath.Join(dir, "run")
	r := runCLI("train", "--config", config, "--run", runDir, "--data", text)
	if r.code != 0 || !strings.Contains(r.stdout, "micro: steps 0→6") || !strings.Contains(r.stdout, "val ") {
		t.Fatalf("train: %+v", r)
	}
	if !strings.Contains(r.stderr, "step 6 100%") {
		t.Errorf("no progress lines on stderr:\n%s", r.stderr)
	}
	if r := runCLI("train", "--run", runDir); r.code != 0 || !strings.Contains(r.stdout, "has done its 6 steps") {
		t.Errorf("train a finished run: %+v", r)
	}
	if r := runCLI("train", "--run", runDir, "--steps", "2"); r.code != 0 || !strings.Contains(r.stdout, "steps 6→8") {
		t.Errorf("resume: %+v", r)
	}
	if r := runCLI("generate", "--run", runDir, "--prompt", "Emma", "-n", "12", "--temperature", "0"); r.code != 0 || !strings.HasPrefix(r.stdout, "Emma") || !strings.Contains(r.stderr, "12 tokens") {
		t.Errorf("generate: %+v", r)
	}
	a := runCLI("generate", "--run", runDir, "-n", "12", "--seed", "3")
	b := runCLI("generate", "--run", runDir, "-n", "12", "--seed", "3", "--no-cache")
	if a.code != 0 || a.stdout != b.stdout {
		t.Errorf("the same seed with and without the KV cache: %q vs %q", a.stdout, b.stdout)
	}
	if r := runCLI("eval", "--run", runDir); r.code != 0 || !strings.Contains(r.stdout, "step 8: validation loss") {
		t.Errorf("eval: %+v", r)
	}
	if r := runCLI("info", "--run", runDir); r.code != 0 || !strings.Contains(r.stdout, "parameters:") {
		t.Errorf("info: %+v", r)
	}
	out := filepath.Join(dir, "export")
	if r := runCLI("export", "--run", runDir, "--out", out); r.code != 0 || !strings.Contains(r.stdout, "llama") {
		t.Errorf("export: %+v", r)
	}
	for _, f := range []string{"model.safetensors", "config.json", "forge-tokenizer.json", "README.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("export wrote no %s", f)
		}
	}
	// A quantised export of a run trained without quant needs a mode.
	qout := filepath.Join(dir, "export-int8")
	if r := runCLI("export", "--run", runDir, "--out", qout, "--quant"); r.code == 0 || !strings.Contains(r.stderr, "int8 or ternary") {
		t.Errorf("export --quant of a run without quant: %+v", r)
	}
	if r := runCLI("export", "--run", runDir, "--out", qout, "--quant", "--quant-mode", "int8"); r.code != 0 || !strings.Contains(r.stdout, "int8 block weights") {
		t.Errorf("export --quant --quant-mode int8: %+v", r)
	}
	if m, tok, mode, err := train.LoadQuantized(qout); err != nil || mode != "int8" || tok == nil || m == nil {
		t.Errorf("loading the quantised export: mode %q, tokenizer %v, err %v", mode, tok != nil, err)
	}
}

// Ctrl-C stops training at a step boundary and saves that step.
func TestInterruptSaves(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	runDir := filepath.Join(dir, "run")
	sig := make(chan os.Signal, 1)
	var out bytes.Buffer
	// The first progress line (every 2 steps of 40) presses Ctrl-C.
	errw := writerFunc(func(p []byte) (int, error) {
		if bytes.Contains(p, []byte("step ")) {
			select {
			case sig <- os.Interrupt:
			default:
			}
		}
		return len(p), nil
	})
	code := run(&env{stdout: &out, stderr: errw, interrupt: sig}, []string{"train", "--config", config, "--run", runDir, "--data", text, "--steps", "40"})
	if code != 0 || !strings.Contains(out.String(), "interrupted at step") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	var step int
	fmt.Sscanf(out.String()[strings.Index(out.String(), "interrupted at step")+len("interrupted at step"):], "%d", &step)
	if step < 2 || step >= 40 {
		t.Fatalf("stopped at step %d", step)
	}
	r := runCLI("info", "--run", runDir)
	if !strings.Contains(r.stdout, fmt.Sprintf("at step %d", step)) {
		t.Errorf("the saved run is not at step %d: %s", step, r.stdout)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// prepare → read the token files → decode gives back the text.
func TestPrepareRoundTrip(t *testing.T) {
	dir := t.TempDir()
	_, text := micro(t, dir)
	out := filepath.Join(dir, "prep")
	for _, kind := range []string{"bpe", "char"} {
		r := runCLI("prepare", "--out", out, "--vocab", "300", "--tokenizer", kind, "--context", "64", text)
		if r.code != 0 || !strings.Contains(r.stdout, "bytes/token") {
			t.Fatalf("%s: %+v", kind, r)
		}
		tok, err := tokenizer.Load(filepath.Join(out, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, f := range []string{"train.bin", "val.bin"} {
			toks, err := data.ReadTokens(filepath.Join(out, f))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range toks {
				ids = append(ids, int(v))
			}
		}
		want, _ := os.ReadFile(text)
		if got := tok.Decode(ids); got != string(want) {
			t.Errorf("%s: decoded token files differ from the text (%d vs %d bytes)", kind, len(got), len(want))
		}
	}
}

// forge prepare, then forge train on the prepared directory.
func TestTrainOnPrepared(t *testing.T) {
	dir := t.TempDir()
	config, text := micro(t, dir)
	prep := filepath.Join(dir, "prep")
	if r := runCLI("prepare", "--out", prep, "--vocab", "280", "--context", "32", text); r.code != 0 {
		t.Fatal(r)
	}
	runDir := filepath.Join(dir, "run")
	if r := runCLI("train", "--config", config, "--run", runDir, "--data", prep, "--steps", "2", "--quiet"); r.code != 0 || !strings.Contains(r.stdout, "steps 0→2") {
		t.Fatalf("%+v", r)
	}
	a, _ := os.ReadFile(filepath.Join(prep, "train.bin"))
	b, _ := os.ReadFile(filepath.Join(runDir, "data", "train.bin"))
	if !bytes.Equal(a, b) {
		t.Error("the run does not train on the prepared tokens")
	}
	// A tokenizer larger than the model's vocabulary is refused.
	big := filepath.Join(dir, "big")
	runCLI("prepare", "--out", big, "--vocab", "400", "--context", "32", text)
	if r := runCLI("train", "--config", config, "--run", filepath.Join(dir, "run2"), "--data", big); r.code != 1 || !strings.Contains(r.stderr, "at least 400") {
		t.Errorf("%+v", r)
	}
}

// Bad arguments and bad files: one line on stderr, a non-zero exit.
func TestErrors(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	badConfig := filepath.Join(dir, "bad.json")
	os.WriteFile(badConfig, []byte(`{"model": {"n_head": 3}}`), 0o644)
	huge := filepath.Join(dir, "huge.json")
	os.WriteFile(huge, []byte(`{"name": "huge", "model": {"vocab": 300, "context": 32, "d_model": 1000000000, "n_layer": 2, "n_head": 8}}`), 0o644)
	notRun := filepath.Join(dir, "notrun")
	os.MkdirAll(notRun, 0o755)
	// A run whose every checkpoint is damaged.
	broken := filepath.Join(dir, "broken")
	if r := runCLI("train", "--config", config, "--run", broken, "--data", text, "--steps", "1", "--quiet"); r.code != 0 {
		t.Fatal(r)
	}
	ents, _ := os.ReadDir(filepath.Join(broken, "checkpoints"))
	for _, e := range ents {
		if e.IsDir() {
			os.WriteFile(filepath.Join(broken, "checkpoints", e.Name(), "model.safetensors"), []byte("garbage"), 0o644)
		}
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"train", "--config", "nope"}, 1, `no config named "nope"`},
		{[]string{"train", "--steps", "x"}, 2, `invalid value "x"`},
		{[]string{"train", "--config", badConfig, "--run", filepath.Join(dir, "r1")}, 1, "not a multiple of n_head"},
		{[]string{"train", "--config", config, "--run", filepath.Join(dir, "r2"), "--data", empty}, 1, "is empty"},
		{[]string{"train", "--config", config, "--run", filepath.Join(dir, "r3"), "--data", filepath.Join(dir, "missing.txt")}, 1, "no such file"},
		{[]string{"train", "--run", broken, "--data", text}, 2, "already holds a run"},
		{[]string{"train", "--run", broken}, 1, "no checkpoint"},
		{[]string{"generate", "--run", notRun}, 1, "not a run directory"},
		{[]string{"generate", "--run", broken}, 1, "checksum mismatch"},
		{[]string{"generate", "--run", broken, "-n", "-1"}, 2, "-n -1"},
		{[]string{"eval", "--run", notRun}, 1, "not a run directory"},
		{[]string{"export", "--run", broken}, 2, "--out is required"},
		{[]string{"prepare"}, 2, "--out is required"},
		{[]string{"prepare", "--out", dir, "--tokenizer", "words"}, 2, `--tokenizer "words"`},
		{[]string{"prepare", "--out", filepath.Join(dir, "p"), "--use-tokenizer", text, text}, 1, "tokenizer"},
		{[]string{"info", "--config", "nope"}, 1, "no config named"},
		{[]string{"train", "--config", huge, "--run", filepath.Join(dir, "r5")}, 1, "config huge needs at least"},
		{[]string{"info", "--config", huge, "--params"}, 1, "has weights of"},
		// Numbers out of range: one line and exit 2, before anything runs.
		{[]string{"train", "--config", config, "--run", filepath.Join(dir, "r4"), "--steps", "-3"}, 2, "--steps -3"},
		{[]string{"eval", "--run", broken, "--batches", "-1"}, 2, "--batches -1"},
		{[]string{"generate", "--run", broken, "--temperature", "-1"}, 2, "--temperature -1"},
		{[]string{"generate", "--run", broken, "--temperature", "NaN"}, 2, "--temperature NaN"},
		{[]string{"generate", "--run", broken, "--top-k", "-2"}, 2, "--top-k -2"},
		{[]string{"generate", "--run", broken, "--top-p", "0"}, 2, "--top-p 0"},
		{[]string{"generate", "--run", broken, "--top-p", "1.5"}, 2, "--top-p 1.5"},
		{[]string{"prepare", "--out", filepath.Join(dir, "p2"), "--vocab", "100"}, 2, "--vocab 100"},
		{[]string{"prepare", "--out", filepath.Join(dir, "p2"), "--vocab", "100000000"}, 2, "--vocab 100000000"},
		{[]string{"prepare", "--out", filepath.Join(dir, "p2"), "--val", "1"}, 2, "--val 1"},
		{[]string{"prepare", "--out", filepath.Join(dir, "p2"), "--val", "-0.1"}, 2, "--val -0.1"},
		{[]string{"prepare", "--out", filepath.Join(dir, "p2"), "--context", "0"}, 2, "--context 0"},
		{[]string{"bench", "matmul", "--budget", "-1s"}, 2, "--budget must be positive"},
		{[]string{"bench", "attention", "--d", "0"}, 2, "--d 0"},
		{[]string{"bench", "step", "--steps", "-1"}, 2, "--steps -1"},
		{[]string{"help", "nope"}, 2, `no command "nope"`},
	}
	for _, c := range cases {
		r := runCLI(c.args...)
		if strings.Contains(r.stderr, "panic") {
			t.Errorf("forge %s panicked: %s", strings.Join(c.args, " "), r.stderr)
			continue
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || len(lines) != 1 {
			t.Errorf("forge %s: exit %d (want %d), stderr %q (want one line containing %q)", strings.Join(c.args, " "), r.code, c.code, r.stderr, c.want)
		}
	}
}

// A vocabulary the corpus cannot fill: prepare says how many merges it
// found and how many tokens the tokenizer has.
func TestPrepareSaysVocabShort(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "small.txt")
	os.WriteFile(text, []byte(strings.Repeat("the cat sat on the mat. ", 300)), 0o644)
	r := runCLI("prepare", "--out", filepath.Join(dir, "p"), "--vocab", "4096", "--context", "8", text)
	if r.code != 0 {
		t.Fatal(r)
	}
	tok, err := tokenizer.Load(filepath.Join(dir, "p", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the corpus gave only %d merges, so the tokenizer has %d tokens, not the 4096", tok.VocabSize()-256, tok.VocabSize())
	if tok.VocabSize() >= 4096 || !strings.Contains(r.stderr, want) {
		t.Errorf("%d-token tokenizer; stderr %q, want it to contain %q", tok.VocabSize(), r.stderr, want)
	}
}

// With the newest checkpoint damaged, eval and generate use the older one
// and say so in one warning line naming the damaged checkpoint and the
// step used; export refuses unless --allow-older.
func TestReadersSayTheyFellBack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	run := filepath.Join(dir, "run")
	if r := runCLI("train", "--config", config, "--run", run, "--data", text, "--steps", "1", "--quiet"); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI("train", "--run", run, "--steps", "1", "--quiet"); r.code != 0 {
		t.Fatal(r)
	}
	latest, _ := os.ReadFile(filepath.Join(run, "checkpoints", "latest"))
	name := strings.TrimSpace(string(latest))
	if name != "step-000002" {
		t.Fatalf("latest is %q", name)
	}
	os.WriteFile(filepath.Join(run, "checkpoints", name, "model.safetensors"), []byte("garbage"), 0o644)
	for _, args := range [][]string{
		{"eval", "--run", run, "--batches", "1"},
		{"generate", "--run", run, "-n", "3"},
		{"export", "--run", run, "--out", filepath.Join(dir, "exp"), "--allow-older"},
	} {
		r := runCLI(args...)
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		var warn []string
		for _, l := range lines {
			if strings.HasPrefix(l, "warning:") {
				warn = append(warn, l)
			}
		}
		if r.code != 0 || len(warn) != 1 || !strings.Contains(warn[0], name) || !strings.Contains(warn[0], "step 1") {
			t.Errorf("forge %s: exit %d, stderr %q: want exit 0 and one warning naming %s and step 1", strings.Join(args, " "), r.code, r.stderr, name)
		}
	}
	r := runCLI("export", "--run", run, "--out", filepath.Join(dir, "exp2"))
	if r.code != 1 || !strings.Contains(r.stderr, "--allow-older") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("export of a run whose latest checkpoint is damaged: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "exp2")); err == nil {
		t.Error("the refused export wrote its output directory")
	}
}

// A prepared directory whose set is mixed — a newer tokenizer beside older
// token files, as a prepare killed over an older output leaves it — is
// refused by forge train --data with one line, whether the interrupted
// prepare had removed the manifest (as it does first) or the files were
// swapped under a manifest.
func TestTrainRefusesMixedPrepared(t *testing.T) {
	dir := t.TempDir()
	config, text := micro(t, dir)
	old, other := filepath.Join(dir, "old"), filepath.Join(dir, "other")
	if r := runCLI("prepare", "--out", old, "--vocab", "260", "--context", "32", text); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI("prepare", "--out", other, "--vocab", "290", "--context", "32", text); r.code != 0 {
		t.Fatal(r)
	}
	newTok, _ := os.ReadFile(filepath.Join(other, "tokenizer.json"))
	for i, c := range []struct {
		name         string
		keepManifest bool
		want         string
	}{
		{"interrupted prepare", false, "has no manifest.json"},
		{"files swapped", true, "tokenizer.json is not the file its manifest records"},
	} {
		mixed := filepath.Join(dir, fmt.Sprintf("mixed%d", i))
		os.CopyFS(mixed, os.DirFS(old))
		if !c.keepManifest {
			os.Remove(filepath.Join(mixed, "manifest.json"))
		}
		os.WriteFile(filepath.Join(mixed, "tokenizer.json"), newTok, 0o644)
		r := runCLI("train", "--config", config, "--run", filepath.Join(dir, fmt.Sprintf("run%d", i)), "--data", mixed, "--steps", "1", "--quiet")
		if r.code != 1 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q", c.name, r.code, r.stderr, c.want)
		}
	}
	// The untouched set still trains.
	if r := runCLI("train", "--config", config, "--run", filepath.Join(dir, "good"), "--data", old, "--steps", "1", "--quiet"); r.code != 0 {
		t.Errorf("a complete set: %+v", r)
	}
}

// forge check: exit 0 and a summary for a sound run; a line per problem,
// with what forge does about it, and exit 1 when there is one.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	run := filepath.Join(dir, "run")
	if r := runCLI("train", "--config", config, "--run", run, "--data", text, "--steps", "1", "--quiet"); r.code != 0 {
		t.Fatal(r)
	}
	if r := runCLI("check", "--run", run); r.code != 0 || !strings.Contains(r.stdout, "step 1") || !strings.Contains(r.stdout, "no problems") {
		t.Errorf("sound run: %+v", r)
	}
	os.MkdirAll(filepath.Join(run, "checkpoints", ".tmp-step-000002-q"), 0o755)
	r := runCLI("check", run)
	if r.code != 1 || !strings.Contains(r.stdout, "problem: ") || !strings.Contains(r.stdout, ".tmp-step-000002-q") || !strings.Contains(r.stdout, "1 problem") {
		t.Errorf("run with a leftover: %+v", r)
	}
	if r := runCLI("info", "--run", run); r.code != 0 || !strings.Contains(r.stdout, "check: ") || !strings.Contains(r.stdout, "1 problem") {
		t.Errorf("info --run does not show the check's summary: %+v", r)
	}
	if r := runCLI("check", "--run", filepath.Join(dir, "nope")); r.code != 1 || !strings.Contains(r.stderr, "not a run directory") {
		t.Errorf("not a run: %+v", r)
	}
}
