//go:build unix

package cli

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/forge/train"
)

// TestMain lets the test binary stand in for the forge command: with
// FORGE_CLI_HELPER=1 it runs the command line after "--" and exits, so
// that TestKill can kill a real forge process at any moment.
func TestMain(m *testing.M) {
	if os.Getenv("FORGE_CLI_HELPER") == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Exit(Run(os.Args[i+1:], os.Stdout, os.Stderr))
			}
		}
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// forgeCmd is a forge command line run by the test binary.
func forgeCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "FORGE_CLI_HELPER=1")
	return cmd
}

// killAt starts cmd and kills it with SIGKILL after d (if it is still
// running); it reports whether the kill came before the end.
func killAt(t *testing.T, cmd *exec.Cmd, d time.Duration) bool {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v ended by itself with %v: %s", cmd.Args, err, out.String())
		}
		return false
	case <-time.After(d):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return true
	}
}

// timed runs cmd to the end and returns how long it took.
func timed(t *testing.T, cmd *exec.Cmd) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", cmd.Args, err, out)
	}
	return time.Since(start)
}

// TestKill kills forge train (checkpointing every step), forge prepare
// over an older output and forge export over an older export at random
// moments, FORGE_KILL_TRIALS times each (default 6), and checks what each
// leaves: a run that reopens and resumes, with forge check finding at most
// what the next open repairs; a prepared directory that is either a
// complete set or refused by forge train --data; an export that is the old
// one or the new one whole (or, killed between its two renames, set aside
// and restored by the next export).
func TestKill(t *testing.T) {
	trials := 6
	if v, err := strconv.Atoi(os.Getenv("FORGE_KILL_TRIALS")); err == nil && v > 0 {
		trials = v
	}
	dir := t.TempDir()
	t.Setenv("FORGE_CACHE_DIR", filepath.Join(dir, "cache"))
	config, text := micro(t, dir)
	os.WriteFile(config, []byte(`{"name": "micro",
	  "model": {"vocab": 300, "context": 32, "d_model": 32, "n_layer": 2, "n_head": 2},
	  "batch": 4, "steps": 100000, "warmup": 2, "eval_every": 0, "save_every": 1}`), 0o644)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))

	t.Run("train", func(t *testing.T) {
		killed, inSave := 0, 0
		for i := range trials {
			run := filepath.Join(dir, "run"+strconv.Itoa(i))
			d := time.Duration(300+r.IntN(1500)) * time.Millisecond
			if killAt(t, forgeCmd("train", "--config", config, "--run", run, "--data", text, "--quiet"), d) {
				killed++
			}
			if tmps, _ := filepath.Glob(filepath.Join(run, "checkpoints", ".tmp-*")); len(tmps) > 0 {
				inSave++
			}
			if _, err := os.Stat(filepath.Join(run, train.ConfigFile)); err != nil {
				continue // killed while creating: nothing to reopen, and a new train starts afresh
			}
			rep, err := train.Check(run)
			if err != nil {
				t.Fatalf("trial %d: %v", i, err)
			}
			for _, p := range rep.Problems {
				if !strings.Contains(p.Action, "next time the run is opened") && !strings.Contains(p.Action, "next open") {
					t.Errorf("trial %d (killed after %v): forge check: %s", i, d, p)
				}
			}
			out, err := forgeCmd("train", "--run", run, "--steps", "1", "--quiet").CombinedOutput()
			if err != nil {
				t.Errorf("trial %d (killed after %v): resuming: %v: %s", i, d, err, out)
			}
		}
		t.Logf("%d trials, %d killed mid-run, %d of them inside a save or a prune; every run reopened and resumed", trials, killed, inSave)
	})

	t.Run("prepare", func(t *testing.T) {
		big := filepath.Join(dir, "big.txt")
		os.WriteFile(big, []byte(data.Austen()[:1500000]), 0o644)
		outDir := filepath.Join(dir, "prep")
		dur := timed(t, forgeCmd("prepare", "--out", outDir, "--vocab", "300", "--context", "32", big))
		killed, complete, refused := 0, 0, 0
		for i := range trials {
			// Over an older set of another vocabulary, as the defect had it.
			timed(t, forgeCmd("prepare", "--out", outDir, "--vocab", "280", "--context", "32", text))
			if killAt(t, forgeCmd("prepare", "--out", outDir, "--vocab", "300", "--context", "32", big), time.Duration(r.Int64N(int64(dur)))) {
				killed++
			}
			if data.VerifyManifest(outDir) == nil {
				complete++
				tok, err := tokenizer.Load(filepath.Join(outDir, "tokenizer.json"))
				if err != nil {
					t.Fatal(err)
				}
				toks, _ := data.ReadTokens(filepath.Join(outDir, data.TrainFile))
				val, _ := data.ReadTokens(filepath.Join(outDir, data.ValFile))
				ids := make([]int, 0, len(toks)+len(val))
				for _, v := range append(toks, val...) {
					ids = append(ids, int(v))
				}
				got := tok.Decode(ids)
				a, _ := os.ReadFile(text)
				b, _ := os.ReadFile(big)
				if got != string(a) && got != string(b) {
					t.Errorf("trial %d: a set that verifies decodes to neither text (%d bytes)", i, len(got))
				}
				continue
			}
			refused++
			out, err := forgeCmd("train", "--config", config, "--run", filepath.Join(dir, "pr"+strconv.Itoa(i)), "--data", outDir, "--steps", "1", "--quiet").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "run forge prepare again") {
				t.Errorf("trial %d: forge train on an incomplete set: %v: %s", i, err, out)
			}
		}
		t.Logf("%d trials, %d killed mid-prepare: %d left a complete set, %d an incomplete one that train refused", trials, killed, complete, refused)
	})

	t.Run("export", func(t *testing.T) {
		run := filepath.Join(dir, "exprun")
		if out, err := forgeCmd("train", "--config", config, "--run", run, "--data", text, "--steps", "2", "--quiet").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		ref := func(name string) map[string]string {
			p := filepath.Join(dir, name)
			timed(t, forgeCmd("export", "--run", run, "--out", p))
			m := map[string]string{}
			for _, f := range []string{"model.safetensors", "config.json", "forge-tokenizer.json"} {
				b, _ := os.ReadFile(filepath.Join(p, f))
				m[f] = string(b)
			}
			return m
		}
		older := ref("ref-old")
		if out, err := forgeCmd("train", "--run", run, "--steps", "1", "--quiet").CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		newer := ref("ref-new")
		out := filepath.Join(dir, "exp")
		dur := timed(t, forgeCmd("export", "--run", run, "--out", out))
		killed, asOld, asNew, aside := 0, 0, 0, 0
		for i := range trials {
			os.RemoveAll(out)
			os.CopyFS(out, os.DirFS(filepath.Join(dir, "ref-old")))
			if killAt(t, forgeCmd("export", "--run", run, "--out", out), time.Duration(r.Int64N(int64(dur)))) {
				killed++
			}
			if _, err := os.Stat(out); err != nil {
				aside++ // killed between the renames: the next export restores and replaces it
				timed(t, forgeCmd("export", "--run", run, "--out", out))
			}
			got := map[string]string{}
			for f := range older {
				b, _ := os.ReadFile(filepath.Join(out, f))
				got[f] = string(b)
			}
			switch {
			case maps.Equal(got, older):
				asOld++
			case maps.Equal(got, newer):
				asNew++
			default:
				t.Errorf("trial %d: the export is neither the old one nor the new one whole", i)
			}
		}
		t.Logf("%d trials, %d killed mid-export: %d left the old export, %d the new one, %d one set aside (restored by the next export)", trials, killed, asOld, asNew, aside)
	})
}
