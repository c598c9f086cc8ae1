package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/data"
)

// TestPrepareStreamAndTrainOnShards: forge prepare streams a weighted
// mixture of a JSON Lines file and a directory of text into shards, and
// forge train trains on the shards, resumes exactly where it was, and
// evaluates; bad sources get one line.
func TestPrepareStreamAndTrainOnShards(t *testing.T) {
	dir := t.TempDir()
	config, text := micro(t, dir)
	paras := strings.Split(data.Austen()[:400000], "\n\n")
	var jl strings.Builder
	for _, p := range paras[:len(paras)/2] {
		b, _ := json.Marshal(map[string]string{"body": p})
		jl.Write(append(b, '\n'))
	}
	os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(jl.String()), 0o644)
	os.MkdirAll(filepath.Join(dir, "texts"), 0o755)
	for i, p := range paras[len(paras)/2:] {
		os.WriteFile(filepath.Join(dir, "texts", fmt.Sprintf("%05d.txt", i)), []byte(p), 0o644)
	}
	prep := filepath.Join(dir, "prep")
	r := runCLI("prepare", "--out", prep, "--data", filepath.Join(dir, "a.jsonl")+":2", "--data", filepath.Join(dir, "texts")+":1",
		"--field", "body", "--vocab", "300", "--sample", "100KB", "--shard-tokens", "20000", "--chunk", "8KB", "--context", "32")
	if r.code != 0 || !strings.Contains(r.stdout, "a.jsonl") || !strings.Contains(r.stdout, "shard(s)") || !strings.Contains(r.stderr, "encoding") {
		t.Fatalf("prepare: %+v", r)
	}
	shards, _ := data.ShardFiles(filepath.Join(prep, "train"))
	if len(shards) < 3 {
		t.Fatalf("%d training shards", len(shards))
	}
	runDir := filepath.Join(dir, "run")
	a := runCLI("train", "--config", config, "--run", runDir, "--data", prep, "--steps", "4", "--quiet")
	if a.code != 0 || !strings.Contains(a.stdout, "steps 0→4") {
		t.Fatalf("train on shards: %+v", a)
	}
	if r := runCLI("train", "--run", runDir, "--steps", "2", "--quiet"); r.code != 0 || !strings.Contains(r.stdout, "steps 4→6") {
		t.Fatalf("resume on shards: %+v", r)
	}
	// 4 + 2 steps equal 6 uninterrupted.
	whole := filepath.Join(dir, "whole")
	if r := runCLI("train", "--config", config, "--run", whole, "--data", prep, "--steps", "6", "--quiet"); r.code != 0 {
		t.Fatal(r)
	}
	m1, _ := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	m2, _ := os.ReadFile(filepath.Join(whole, "metrics.jsonl"))
	if losses(t, m1) != losses(t, m2) {
		t.Errorf("resumed losses %s, uninterrupted %s", losses(t, m1), losses(t, m2))
	}
	if r := runCLI("eval", "--run", runDir, "--batches", "2"); r.code != 0 || !strings.Contains(r.stdout, "validation loss") {
		t.Errorf("eval: %+v", r)
	}
	if r := runCLI("check", "--run", runDir); r.code != 0 {
		t.Errorf("check: %+v", r)
	}
	// A changed shard is refused when the run reopens.
	os.Remove(filepath.Join(runDir, "data", "train", filepath.Base(shards[1])))
	if r := runCLI("train", "--run", runDir, "--steps", "1", "--quiet"); r.code == 0 || !strings.Contains(r.stderr, "missing") {
		t.Errorf("a missing shard: %+v", r)
	}
	// A one-shot prepare into the same directory removes the shards, and
	// a streamed one the one-shot files: a run never takes stale ones.
	if r := runCLI("prepare", "--out", prep, "--vocab", "280", "--context", "32", text); r.code != 0 {
		t.Fatal(r)
	}
	if _, err := os.Stat(filepath.Join(prep, "train")); !os.IsNotExist(err) {
		t.Errorf("the one-shot prepare left the streamed shards: %v", err)
	}
	if r := runCLI("prepare", "--out", prep, "--data", text, "--vocab", "280", "--context", "32", "--chunk", "2KB"); r.code != 0 {
		t.Fatal(r)
	}
	if _, err := os.Stat(filepath.Join(prep, "train.bin")); !os.IsNotExist(err) {
		t.Errorf("the streamed prepare left the one-shot train.bin: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", filepath.Join(dir, "a.jsonl")}, `no field "text"`},
		{[]string{"--data", filepath.Join(dir, "a.jsonl") + ":0"}, "weight 0 must be a positive number"},
		{[]string{"--data", filepath.Join(dir, "nothing.parquet")}, "no such file"},
		{[]string{"--mix", "nosuch:1"}, `no preset "nosuch"`},
		{[]string{"--data", filepath.Join(dir, "a.jsonl"), "--sample", "lots"}, "--sample"},
	} {
		r := runCLI(append([]string{"prepare", "--out", filepath.Join(dir, "bad")}, c.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("prepare %s: exit %d, stderr %q; want one line with %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
	}
}

// losses is the "loss" values of a metrics log, as text.
func losses(t *testing.T, log []byte) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if l, ok := m["loss"]; ok {
				b, _ := json.Marshal(l)
				out = append(out, string(b))
			}
		}
	}
	return strings.Join(out, ",")
}
