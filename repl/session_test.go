package repl

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// newTestSession returns a session writing stdout and stderr to one buffer,
// and a directory holding micro.json.
func newTestSession(t *testing.T) (*Session, *bytes.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/micro.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "micro.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s, err := NewSession(&out, &out, Options{
		Log:         &bytes.Buffer{},
		OpenBrowser: func(string) error { return errors.New("no browser in tests") },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &out, dir
}

// transcript feeds the script's lines to the session as the line loop
// does, echoing each after its prompt.
func transcript(t *testing.T, s *Session, out *bytes.Buffer, script, dir string) string {
	t.Helper()
	f := &feeder{s: s}
	var tr strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(script, "\n"), "\n") {
		prompt := Prompt
		if len(f.pending) > 0 {
			prompt = MorePrompt
		}
		tr.WriteString(prompt + strings.ReplaceAll(line, dir, "$DIR") + "\n")
		out.Reset()
		quit, _ := f.line(context.Background(), line)
		tr.WriteString(normalize(line, strings.ReplaceAll(out.String(), dir, "$DIR")))
		if quit {
			break
		}
	}
	return tr.String()
}

var (
	reDuration = regexp.MustCompile(`\d+(\.\d+)?\s?(ns|µs|ms|s)\b`)
	reRate     = regexp.MustCompile(`\d+(\.\d+)?[kM]? (tok/s|tokens/s|GFLOP/s|GB/s)`)
	reFloat    = regexp.MustCompile(`-?\d+\.\d+(e[-+]\d+)?`)
	reDigits   = regexp.MustCompile(`\d+`)
	reSpaces   = regexp.MustCompile(` {2,}`)
	reHistRow  = regexp.MustCompile(`(?m)^ +\d+ +#\.#.*$`)
	reBLASCore = regexp.MustCompile(`openblas-[A-Za-z0-9]+`)
)

// normalize masks what changes from run to run or machine to machine:
// timings, rates, floating-point values (losses are compared exactly by
// TestReplMatchesTrain instead); profiles and benchmarks keep only their
// shape.
func normalize(input, out string) string {
	// What the device runs with depends on the machine (the BLAS library's
	// version and kernels): the line itself is checked by TestInfoDevice.
	out = strings.ReplaceAll(out, forge.DefaultDevice().Describe(), "<device>")
	out = reBLASCore.ReplaceAllString(out, "openblas-<core>")
	out = reRate.ReplaceAllString(out, "<rate>")
	out = reDuration.ReplaceAllString(out, "<time>")
	out = reFloat.ReplaceAllString(out, "#.#")
	out = reHistRow.ReplaceAllStringFunc(out, func(s string) string { return reDigits.ReplaceAllString(s, "#") })
	out = reSpaces.ReplaceAllString(out, " ")
	if strings.HasPrefix(out, "error: ") {
		return out
	}
	if strings.HasPrefix(input, ":profile") || strings.HasPrefix(input, ":bench") || strings.HasPrefix(input, ":sample") || strings.HasPrefix(input, ":plot loss") {
		out = reDigits.ReplaceAllString(out, "#")
		out = reSpaces.ReplaceAllString(out, " ")
		if strings.HasPrefix(input, ":profile") && strings.Count(out, "\n") > 5 {
			// The kernel table's rows depend on timings: keep its head
			// (the header, the device line, the phase table's head).
			lines := strings.SplitAfter(out, "\n")
			out = strings.Join(lines[:5], "") + "…\n"
		}
		if strings.HasPrefix(input, ":sample") || strings.HasPrefix(input, ":plot loss\n") || input == ":plot loss" {
			// Sampled text and chart shapes follow the losses: keep the last line.
			lines := strings.SplitAfter(strings.TrimSuffix(out, "\n"), "\n")
			out = "… " + lines[len(lines)-1] + "\n"
		}
	}
	return out
}

// goldenTranscript runs testdata/<name>.forge in a new session and
// compares its transcript with testdata/<name>.golden (-update rewrites
// it), returning the transcript and the session's directory.
func goldenTranscript(t *testing.T, name string) (got, dir string) {
	t.Helper()
	s, out, dir := newTestSession(t)
	script, err := os.ReadFile("testdata/" + name + ".forge")
	if err != nil {
		t.Fatal(err)
	}
	got = transcript(t, s, out, strings.ReplaceAll(string(script), "$DIR", dir), dir)
	golden := "testdata/" + name + ".golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./repl -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("transcript differs from %s (go test ./repl -run %s -update rewrites it):\n%s", golden, t.Name(), diff(string(want), got))
	}
	return got, dir
}

func TestTranscript(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	got, dir := goldenTranscript(t, "session")
	// Every error is one line, and the session went on after each.
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "error: ") && strings.Contains(l, "goroutine") {
			t.Errorf("an error with a stack: %s", l)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "plots", "loss-val_loss.html")); err != nil {
		t.Errorf(":plot --browser wrote no page: %v", err)
	}
}

// :info says what the device runs its kernels with, in Describe's words,
// and the memory training needs.
func TestInfoDevice(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, out, dir := newTestSession(t)
	got := transcript(t, s, out, ":new "+filepath.Join(dir, "micro.json")+" "+filepath.Join(dir, "run")+"\n:info", dir)
	want := "\ndevice    " + forge.DefaultDevice().Describe() + "\n"
	if !strings.Contains(strings.ReplaceAll(out.String(), dir, "$DIR"), want) {
		t.Errorf(":info lacks %q:\n%s", want, got)
	}
	// and the training memory estimate (train.Config.MemoryNeeded).
	if want := "\nmemory    at least " + s.run.Config().MemoryNeeded().String() + " to train\n"; !strings.Contains(out.String(), want) {
		t.Errorf(":info lacks %q:\n%s", want, got)
	}
}

// diff shows the first differing lines.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + itoa(i+1) + ":\n  want: " + a + "\n  got:  " + b
		}
	}
	return ""
}

func itoa(i int) string {
	return strings.TrimSpace(strings.Repeat(" ", 0) + func() string { return fmtInt(i) }())
}

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// :info of a Muon run lists which parameters Muon updates and which
// AdamW, and :step trains it.
func TestInfoMuonGroups(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	s, out, dir := newTestSession(t)
	b, err := os.ReadFile(filepath.Join(dir, "micro.json"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("{"), []byte(`{"optimizer": "muon", `), 1)
	if err := os.WriteFile(filepath.Join(dir, "muon.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got := transcript(t, s, out, ":new "+filepath.Join(dir, "muon.json")+" "+filepath.Join(dir, "run")+"\n:step 2\n:info", dir)
	for _, want := range []string{
		"optimizer muon (peak lr 0.02, momentum 0.95 Nesterov, 5 Newton–Schulz steps, weight decay 0) on the blocks' matrices; adamw",
		"muon  lr ", " 10 tensors, 20,480 values: blocks.*.attn.wqkv.weight, blocks.*.attn.wo.weight, blocks.*.mlp.w_gate.weight, blocks.*.mlp.w_up.weight, blocks.*.mlp.w_down.weight",
		"adamw lr ", " 1 tensors, 16,384 values: wte.weight",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf(":info of a Muon run lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "steps 0→2 in") {
		t.Errorf(":step 2 of a Muon run:\n%s", got)
	}
}
