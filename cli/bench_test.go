package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/internal/fmapeak"
)

func TestBenchKernels(t *testing.T) {
	r := runCLI("bench", "matmul", "64", "32", "16", "--budget", "20ms")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "matmul 64×32×16 float32 on cpu (") || !strings.Contains(r.stdout, "GFLOP/s\n  ") ||
		!strings.Contains(r.stdout, "per loop (median ± std. dev. of ") {
		t.Errorf("matmul: %+v", r)
	}
	r = runCLI("bench", "attention", "--b", "2", "--t", "16", "--h", "2", "--d", "8", "--budget", "20ms")
	if r.code != 0 || !strings.Contains(r.stdout, "attention B2 T16 H2 D8 causal") || !strings.Contains(r.stdout, "attention+backward B2 T16 H2 D8 causal") {
		t.Errorf("attention: %+v", r)
	}
	r = runCLI("bench", "copy", "4096", "--budget", "10ms", "--json")
	var res []map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || len(res) != 1 || res[0]["unit"] != "GB/s" || res[0]["bytes"] != 32768.0 {
		t.Errorf("copy --json: %+v", r)
	}
}

func TestBenchStepProfileTrace(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, _ := micro(t, dir)
	trace := filepath.Join(dir, "step.json")
	r := runCLI("bench", "step", "--config", config, "--budget", "50ms", "--steps", "2", "--trace", trace, "--roofline=false", "--top", "5")
	if r.code != 0 {
		t.Fatalf("step: %+v", r)
	}
	for _, want := range []string{"step micro: ", "tokens/s", "per step (median", "2 steps profiled; per step:", "outside kernels",
		"forward", "backward", "optimizer", "matmul (", "more rows", "trace written to " + trace} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("step output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "% roof") {
		t.Errorf("--roofline=false printed a roofline:\n%s", r.stdout)
	}
	b, err := os.ReadFile(trace)
	var tr struct{ TraceEvents []map[string]any }
	if err != nil || json.Unmarshal(b, &tr) != nil || len(tr.TraceEvents) < 10 {
		t.Errorf("trace: %v, %d events", err, len(tr.TraceEvents))
	}
	r = runCLI("bench", "step", "--config", config, "--budget", "20ms", "--steps", "1", "--profile", "--group", "scope", "--roofline=false")
	if r.code != 0 || !strings.Contains(r.stdout, "blocks.0") || !strings.Contains(r.stdout, "(backward)") {
		t.Errorf("step --group scope: %+v", r)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench"}, "name a kernel to time"},
		{[]string{"bench", "conv2d"}, `no kernel benchmark "conv2d"`},
		{[]string{"bench", "matmul", "8", "8"}, "matmul takes 3 sizes (M N K), got 2"},
		{[]string{"bench", "matmul", "8", "x", "8"}, `sizes must be positive integers, got "x"`},
		{[]string{"bench", "softmax", "8", "-1"}, "flag provided but not defined: -1"},
		{[]string{"bench", "matmul", "8", "8", "8", "--config", "tiny"}, "matmul does not take --config"},
		{[]string{"bench", "attention", "2", "16", "2", "8", "--b", "4"}, "not both"},
		{[]string{"bench", "step", "--group", "layer"}, "--group must be shape, name or scope"},
		{[]string{"bench", "step", "--sort", "speed"}, "--sort must be"},
		{[]string{"bench", "step", "tiny"}, "step takes no sizes"},
		{[]string{"bench", "copy", "8", "--budget", "0s"}, "--budget must be positive"},
		{[]string{"bench", "peak", "now"}, "peak takes no arguments"},
	} {
		r := runCLI(tc.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "forge bench: ") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := runCLI("bench", "step", "--config", "no-such-config", "--budget", "10ms"); r.code != 1 {
		t.Errorf("unknown config: %+v", r)
	}
	if r := runCLI("help", "bench"); r.code != 0 || !strings.Contains(r.stdout, "usage: forge bench matmul M N K") || !strings.Contains(r.stdout, "-recalibrate") {
		t.Errorf("help bench: %+v", r)
	}
}

// `forge info` and `forge bench` say what the device runs its kernels with
// (Device.Describe: for the CPU the BLAS library, its kernels and who
// chose them), and the peak gives the FMA roof with sgemm beside it.
func TestInfoAndBenchSayWhatRan(t *testing.T) {
	t.Setenv("FORGE_CACHE_DIR", t.TempDir())
	line := "device: " + forge.DefaultDevice().Describe() + "\n"
	if !strings.HasPrefix(line, "device: cpu: ") {
		t.Fatalf("the CPU's Describe line: %q", line)
	}
	for _, args := range [][]string{{"info"}, {"info", "--config", "tiny"}, {"bench", "copy", "4096", "--budget", "10ms"}} {
		if r := runCLI(args...); r.code != 0 || !strings.HasSuffix(r.stdout, "\n"+line) {
			t.Errorf("%v does not end with %q: %+v", args, line, r)
		}
	}
	r := runCLI("bench", "peak")
	// The roof is the FMA loop's, or (where a busy machine measured the
	// loop below the sgemm) the sgemm's, saying so.
	roof := " GFLOP/s FMA (" + fmapeak.Best().Name + " on "
	if strings.Contains(r.stdout, " GFLOP/s from sgemm (above the FMA loop's ") {
		roof = " GFLOP/s from sgemm (above the FMA loop's "
	}
	for _, want := range []string{"cpu (", roof, ", sgemm 2048³ ", " % of peak (matmul ", "\n  " + line} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("bench peak lacks %q: %+v", want, r)
		}
	}
}
