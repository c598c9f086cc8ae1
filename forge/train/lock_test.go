//go:build unix

package train

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenLocks: while a session is open, a second Open of its directory
// is refused with one line naming the holder (this process's pid); Load,
// a reader, still works; after Close the directory opens again.
func TestOpenLocks(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock here")
	}
	cfg := testRunConfig()
	dir := t.TempDir()
	a := openTest(t, dir, &cfg)
	_, err := Open(dir, OpenOptions{})
	if err == nil {
		t.Fatal("a second writer opened a run that is open")
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(msg, "open for writing") || strings.Contains(msg, "\n") {
		t.Errorf("refusal does not name the holder in one line: %q", msg)
	}
	// A new run being created is locked too.
	dir2 := filepath.Join(t.TempDir(), "new")
	c := openTest(t, dir2, &cfg)
	if _, err := Open(dir2, OpenOptions{Config: &cfg, Texts: testTexts(), NoCache: true}); err == nil {
		t.Error("a second writer opened a run being created")
	}
	c.Close()
	if _, err := Load(dir); err != nil {
		t.Errorf("a reader was refused while the run is open: %v", err)
	}
	if _, err := a.Train(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatalf("reopening after Close: %v", err)
	}
	defer b.Close()
	if b.trainer.StepCount() != 2 {
		t.Errorf("reopened at step %d, want 2", b.trainer.StepCount())
	}
}

// TestLockHelperProcess is not a test: TestLockOfKilledProcess runs the
// test binary with FORGE_TEST_HOLD_LOCK set to take a run's lock and wait
// to be killed.
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("FORGE_TEST_HOLD_LOCK")
	if dir == "" {
		t.Skip("helper process only")
	}
	if _, err := lockRun(dir); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestLockOfKilledProcess: a writer killed with SIGKILL while holding a
// run's lock leaves the run free; while it lived, Open was refused and
// named its pid.
func TestLockOfKilledProcess(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no flock here")
	}
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	s.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "FORGE_TEST_HOLD_LOCK="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper: %q", line)
	}
	_, err = Open(dir, OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Fatalf("open while another process holds the lock: %v", err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s, err = Open(dir, OpenOptions{})
	if err != nil {
		t.Fatalf("open after the holder was killed: %v", err)
	}
	s.Close()
}

// TestOpenRemovesOrphans: the leftovers of interrupted writes — a
// checkpoint directory never renamed into place, atomicfile's temporary
// files in the run directory, data/ and checkpoints/ — are gone once the
// run is opened for writing, and nothing else is touched.
func TestOpenRemovesOrphans(t *testing.T) {
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	s.Close()
	root := filepath.Join(dir, CheckpointDir)
	orphans := []string{
		filepath.Join(root, ".tmp-step-000007-abc"),
		filepath.Join(dir, ".metrics.jsonl.tmp-x1"),
		filepath.Join(dir, DataDir, ".train.bin.tmp-x2"),
		filepath.Join(root, ".latest.tmp-x3"),
	}
	os.MkdirAll(orphans[0], 0o755)
	os.WriteFile(filepath.Join(orphans[0], modelFile), make([]byte, 1000), 0o644)
	for _, p := range orphans[1:] {
		os.WriteFile(p, []byte("partial"), 0o644)
	}
	keep := filepath.Join(dir, "notes.txt") // the user's own file
	os.WriteFile(keep, []byte("mine"), 0o644)
	var log strings.Builder
	s, err := Open(dir, OpenOptions{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, p := range orphans {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("removed a file that is not a leftover: %v", err)
	}
	if !strings.Contains(log.String(), "removed 4 leftover") {
		t.Errorf("log does not say what was removed: %q", log.String())
	}
}

// TestSaveAgainKeepsLatest: saving a step that is saved already writes
// the new checkpoint under a new name and switches latest to it, never
// removing the directory latest named first; Train does not save a step
// its save_every already saved.
func TestSaveAgainKeepsLatest(t *testing.T) {
	cfg := testRunConfig()
	cfg.SaveEvery = 2
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	defer s.Close()
	root := filepath.Join(dir, CheckpointDir)
	state := func(name string) fs.FileInfo {
		fi, err := os.Stat(filepath.Join(root, name, stateFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	var atSave fs.FileInfo
	cb := func(m Metrics) error {
		if m.Step == 4 {
			atSave = state("step-000004")
		}
		return nil
	}
	if _, err := s.Train(context.Background(), 4, cb); err != nil {
		t.Fatal(err)
	}
	if l, _ := os.ReadFile(filepath.Join(dir, LatestFile)); strings.TrimSpace(string(l)) != "step-000004" || !os.SameFile(atSave, state("step-000004")) {
		t.Errorf("Train saved step 4 again after save_every had saved it (latest %q)", strings.TrimSpace(string(l)))
	}
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	latest, _ := os.ReadFile(filepath.Join(dir, LatestFile))
	if name := strings.TrimSpace(string(latest)); name != "step-000004-001" {
		t.Errorf("after saving step 4 again latest names %q, want step-000004-001", name)
	}
	if !os.SameFile(atSave, state("step-000004")) {
		t.Error("saving step 4 again removed or rewrote the checkpoint latest named")
	}
	s.Close()
	r, err := Open(dir, OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.trainer.StepCount() != 4 || r.FellBack() != "" {
		t.Errorf("reopened at step %d (fell back: %q)", r.trainer.StepCount(), r.FellBack())
	}
}

// TestCheckpointPermissions: checkpoint directories and files follow the
// umask like the run's other files (0755 and 0644 under umask 022), so
// another user can read a shared run.
func TestCheckpointPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no umask")
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	cfg := testRunConfig()
	dir := t.TempDir()
	s := openTest(t, dir, &cfg)
	defer s.Close()
	ents, _ := os.ReadDir(filepath.Join(dir, CheckpointDir))
	n := 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		n++
		p := filepath.Join(dir, CheckpointDir, e.Name())
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %v, want 0755", p, fi.Mode().Perm())
		}
		files, _ := os.ReadDir(p)
		for _, f := range files {
			if fi, _ := f.Info(); fi.Mode().Perm() != 0o644 {
				t.Errorf("%s/%s has mode %v, want 0644", p, f.Name(), fi.Mode().Perm())
			}
		}
	}
	if n == 0 {
		t.Fatal("no checkpoint")
	}
}
