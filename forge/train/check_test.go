//go:build unix

package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/data"
)

// TestCheck: Check finds nothing wrong with a fresh run, and then one
// problem for each thing planted — a damaged newest checkpoint, a
// leftover of an interrupted save, a changed token file, a damaged
// metrics line — with what forge does about it; it sees a writer's
// lock and names the holder; it changes nothing.
func TestCheck(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery = 0
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	if _, err := s.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	r, err := Check(dir)
	if err != nil || len(r.Problems) != 0 || r.Step != 2 || !strings.Contains(r.Holder, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("fresh run: %+v %v", r, err)
	}
	s.Close()
	if r, _ := Check(dir); r.Holder != "" || !strings.HasSuffix(r.Summary(), "no problems") {
		t.Errorf("closed run: %q", r.Summary())
	}
	if _, err := Check(t.TempDir()); err == nil {
		t.Error("an empty directory passed for a run")
	}
	root := filepath.Join(dir, CheckpointDir)
	os.MkdirAll(filepath.Join(root, ".tmp-step-000003-x"), 0o755)
	tokPath := filepath.Join(dir, DataDir, data.TrainFile)
	b, _ := os.ReadFile(tokPath)
	b[len(b)-2] = (b[len(b)-2] + 1) % 200
	b[len(b)-1] = 0
	os.WriteFile(tokPath, b, 0o644)
	m, _ := os.ReadFile(filepath.Join(dir, MetricsFile))
	m[0] = 'x'
	os.WriteFile(filepath.Join(dir, MetricsFile), m, 0o644)
	before := snapshotTree(t, dir)
	problems := func(wantStep int, wants ...string) {
		t.Helper()
		r, err := Check(dir)
		if err != nil {
			t.Fatal(err)
		}
		var all []string
		for _, p := range r.Problems {
			all = append(all, p.String())
		}
		text := strings.Join(all, "\n")
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("problems do not mention %q:\n%s", want, text)
			}
		}
		if r.Step != wantStep || !strings.Contains(r.Summary(), fmt.Sprintf("%d problems", len(r.Problems))) {
			t.Errorf("step %d (want %d), summary %q", r.Step, wantStep, r.Summary())
		}
	}
	problems(2, ".tmp-step-000003-x", "removed the next time", "not the token file", "forge refuses to open", "metrics.jsonl line 1", "set aside")
	os.WriteFile(filepath.Join(root, "step-000002", modelFile), []byte("garbage"), 0o644)
	before = snapshotTree(t, dir)
	problems(0, "checkpoint step-000002: ", "checksum mismatch", "an older checkpoint is used instead")
	if after := snapshotTree(t, dir); after != before {
		t.Error("Check changed the run directory")
	}
}

// snapshotTree lists every path under dir with its size.
func snapshotTree(t *testing.T, dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			fmt.Fprintf(&b, "%s %d %v\n", p, fi.Size(), fi.ModTime().UnixNano())
		}
		return nil
	})
	return b.String()
}
