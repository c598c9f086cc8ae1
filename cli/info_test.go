package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/train"
	"github.com/forgeml/forge/internal/numfmt"
)

// TestInfoConfig: `forge info --config X` prints, for every embedded
// config, its parameters (gpt.Config.Params), its training FLOPs per
// token (FLOPsPerToken) and the memory estimate (MemoryNeeded); a config
// with checkpoint_activations says so and estimates less memory.
func TestInfoConfig(t *testing.T) {
	for _, name := range configNames() {
		cfg, err := train.LoadConfig(name)
		if err != nil {
			t.Fatal(err)
		}
		r := runCLI("info", "--config", name)
		if r.code != 0 {
			t.Fatalf("info --config %s: %+v", name, r)
		}
		m := cfg.Model
		for _, want := range []string{
			"parameters: " + numfmt.Thousands(m.Params()) + " ",
			"training FLOPs: " + strconv.FormatFloat(float64(m.FLOPsPerToken())/1e6, 'f', 1, 64) + " M per token",
			"memory to train: at least " + cfg.MemoryNeeded().String(),
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("info --config %s: no %q in\n%s", name, want, r.stdout)
			}
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.json")
	os.WriteFile(path, []byte(`{"name": "ck", "model": {"vocab": 512, "context": 128, "d_model": 128, "n_layer": 4, "n_head": 4, "checkpoint_activations": [0, 2]}, "batch": 16}`), 0o644)
	r := runCLI("info", "--config", path)
	if r.code != 0 || !strings.Contains(r.stdout, "blocks [0,2] checkpointed") || !strings.Contains(r.stdout, "2 of 4 blocks checkpointed") {
		t.Fatalf("info of a checkpointed config: %+v", r)
	}
	act := regexp.MustCompile(`activations ([0-9.]+) MiB`)
	os.WriteFile(filepath.Join(dir, "plain.json"), []byte(`{"name": "plain", "model": {"vocab": 512, "context": 128, "d_model": 128, "n_layer": 4, "n_head": 4}, "batch": 16}`), 0o644)
	plain := runCLI("info", "--config", filepath.Join(dir, "plain.json"))
	a, b := act.FindStringSubmatch(r.stdout), act.FindStringSubmatch(plain.stdout)
	if a == nil || b == nil {
		t.Fatalf("no activations in MiB:\n%s\n%s", r.stdout, plain.stdout)
	}
	ck, pl := must(strconv.ParseFloat(a[1], 64)), must(strconv.ParseFloat(b[1], 64))
	if ck >= pl {
		t.Errorf("activations: checkpointed %v MiB, plain %v MiB; want fewer", ck, pl)
	}
	bad := runCLI("info", "--config", writeFile(t, dir, "bad.json", `{"model": {"n_layer": 2, "checkpoint_activations": [2]}}`))
	if bad.code == 0 || !strings.Contains(bad.stderr, "block 2 is out of range: the model has 2 blocks (0..1)") || strings.Count(strings.TrimSpace(bad.stderr), "\n") != 0 {
		t.Errorf("an index out of range: %+v", bad)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
