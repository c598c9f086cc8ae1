package fmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/internal/atomicfile"
)

// tensorOf returns a float32 tensor of n elements drawn from seed.
func tensorOf(name string, seed uint64, shape ...int) safetensors.Tensor {
	n := 1
	for _, s := range shape {
		n *= s
	}
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()
	}
	return safetensors.F32(name, shape, v)
}

func model(seed uint64) []safetensors.Tensor {
	return []safetensors.Tensor{
		tensorOf("wte.weight", seed, 64, 33),
		tensorOf("blocks.0.w", seed+1, 100, 41),
		tensorOf("blocks.1.w", seed+2, 100, 41),
		tensorOf("norm.weight", seed+3, 33),
		safetensors.F32("empty", []int{0, 4}, nil),
	}
}

func sameTensors(t *testing.T, got, want []safetensors.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.DType != w.DType || fmt.Sprint(g.Shape) != fmt.Sprint(w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("tensor %d: got %s %s %v (%d bytes), want %s %s %v (%d bytes)", i, g.Name, g.DType, g.Shape, len(g.Data), w.Name, w.DType, w.Shape, len(w.Data))
		}
	}
}

func TestCommitLoadAndDelta(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m.forge")
	cfg := json.RawMessage(`{"d_model": 33}`)
	v1 := model(1)
	st1, err := CommitTo(dir, Commit{Tensors: v1, Files: map[string][]byte{"tokenizer.json": []byte("tok")}, Config: cfg, Message: "first", Meta: map[string]string{"step": "10"}})
	if err != nil {
		t.Fatal(err)
	}
	if st1.Parent != "" || st1.Written != 6 || st1.Reused != 0 || st1.Shards != 1 {
		t.Fatalf("first commit: %+v", st1)
	}
	// Every part page-aligned, every shard whole pages; the bytes written
	// are the page-rounded blobs.
	var want int64
	for _, x := range v1 {
		want += pageUp(int64(len(x.Data)))
	}
	if st1.BytesWritten != want+PageSize { // + the tokenizer's page
		t.Fatalf("wrote %d bytes, want %d", st1.BytesWritten, want+PageSize)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Load("")
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, s.Tensors(), v1)
	if b, err := s.File("tokenizer.json"); err != nil || string(b) != "tok" {
		t.Fatalf("tokenizer: %q %v", b, err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, s.Manifest.Config)
	if compact.String() != `{"d_model":33}` || s.Manifest.Meta["step"] != "10" || s.Manifest.Message != "first" {
		t.Fatalf("manifest: %+v", s.Manifest)
	}
	for _, e := range s.Manifest.Tensors {
		for _, p := range e.Parts {
			if p.Offset%PageSize != 0 {
				t.Fatalf("%s at offset %d", e.Name, p.Offset)
			}
		}
	}
	s.Close()

	// Change one layer: only it is written.
	v2 := model(1)
	v2[2] = tensorOf("blocks.1.w", 99, 100, 41)
	st2, err := CommitTo(dir, Commit{Tensors: v2, Files: map[string][]byte{"tokenizer.json": []byte("tok")}, Config: cfg, Message: "tune block 1"})
	if err != nil {
		t.Fatal(err)
	}
	if st2.Parent != st1.Hash || st2.Written != 1 || st2.Reused != 5 || st2.BytesWritten != pageUp(100*41*4) {
		t.Fatalf("second commit: %+v (first %s)", st2, st1.Hash)
	}
	log, err := r.Log("")
	if err != nil || len(log) != 2 || log[0].Hash != st2.Hash || log[1].Hash != st1.Hash {
		t.Fatalf("log: %v %v", log, err)
	}
	for _, rev := range []string{"HEAD~1", st1.Hash[:6], strings.ToUpper(st1.Hash[:8]), st1.Hash} {
		if h, err := r.Resolve(rev); err != nil || h != st1.Hash {
			t.Fatalf("Resolve(%q) = %s, %v", rev, h, err)
		}
	}
	for _, rev := range []string{"HEAD~2", "abc", "zzzz", "HEAD~x", "0000000"} {
		if _, err := r.Resolve(rev); err == nil {
			t.Fatalf("Resolve(%q) succeeded", rev)
		}
	}
	s, _ = r.Load("HEAD~1")
	sameTensors(t, s.Tensors(), v1)
	s.Close()

	// Checkout moves HEAD; the next commit's parent is the checked-out one.
	if _, err := r.Checkout(st1.Hash[:8]); err != nil {
		t.Fatal(err)
	}
	s, _ = r.Load("")
	sameTensors(t, s.Tensors(), v1)
	s.Close()
	st3, err := CommitTo(dir, Commit{Tensors: v1, Message: "again"})
	if err != nil || st3.Parent != st1.Hash || st3.Written != 0 || st3.BytesWritten != 0 {
		t.Fatalf("recommit: %+v %v", st3, err)
	}
	rep, err := r.Verify()
	if err != nil || len(rep.Problems) != 0 || rep.Revisions != 3 || rep.Shards != 2 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestSplitAcrossShards(t *testing.T) {
	old := shardLimit
	shardLimit = 2 * PageSize
	defer func() { shardLimit = old }()
	dir := t.TempDir()
	// 5 pages and 12 bytes after a small tensor: it fills the first shard's
	// second page, two more shards, and 12 bytes of a fourth.
	big := tensorOf("big", 3, 5*PageSize/4+3)
	small := tensorOf("small", 4, 10)
	st, err := CommitTo(dir, Commit{Tensors: []safetensors.Tensor{small, big}})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := Open(dir)
	s, err := r.Load("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sameTensors(t, s.Tensors(), []safetensors.Tensor{small, big})
	if s.Copied != 1 || len(s.Manifest.Tensors[1].Parts) != 4 || st.Shards != 4 {
		t.Fatalf("copied %d, parts %+v, shards %d", s.Copied, s.Manifest.Tensors[1].Parts, st.Shards)
	}
	for _, p := range s.Manifest.Tensors[1].Parts {
		if p.Length > shardLimit {
			t.Fatalf("part of %d bytes > limit %d", p.Length, shardLimit)
		}
	}
	// The split tensor has no single run of bytes to lend; the small one has.
	if _, _, ok := s.Lend(0); !ok {
		t.Fatal("small tensor not lent")
	}
	if mem, _, ok := s.Lend(1); ok || mem != nil {
		t.Fatal("a tensor in 4 parts was lent")
	}
	if rep, _ := r.Verify(); len(rep.Problems) != 0 {
		t.Fatal(rep.Problems)
	}
}

func TestDamageIsReported(t *testing.T) {
	dir := t.TempDir()
	st, err := CommitTo(dir, Commit{Tensors: model(5)})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := Open(dir)
	s, _ := r.Load("")
	shard := filepath.Join(dir, ShardDir, s.Manifest.Tensors[1].Parts[0].Shard+shardExt)
	s.Close()

	// A flipped byte: Verify names the shard and the tensor.
	b, _ := os.ReadFile(shard)
	b[100] ^= 1
	os.WriteFile(shard, b, 0o644)
	rep, err := r.Verify()
	if err != nil || len(rep.Problems) == 0 || !strings.Contains(strings.Join(rep.Problems, "\n"), "damaged") {
		t.Fatalf("verify after a flipped byte: %+v %v", rep, err)
	}
	// A truncated shard: Load refuses, naming it.
	os.WriteFile(shard, b[:PageSize], 0o644)
	if _, err := r.Load(""); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("load of a truncated shard: %v", err)
	}
	// A missing shard.
	os.Remove(shard)
	if _, err := r.Load(""); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("load of a missing shard: %v", err)
	}
	// A damaged manifest.
	mp := filepath.Join(dir, ManifestDir, st.Hash+manifestExt)
	mb, _ := os.ReadFile(mp)
	os.WriteFile(mp, bytes.Replace(mb, []byte("forge-model"), []byte("forge-modem"), 1), 0o644)
	if _, err := r.Load(""); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("load with a damaged manifest: %v", err)
	}
	// A damaged parent stops the next commit with a clear line.
	if _, err := CommitTo(dir, Commit{Tensors: model(6)}); err == nil || !strings.Contains(err.Error(), "parent") {
		t.Fatalf("commit over a damaged parent: %v", err)
	}
	os.WriteFile(filepath.Join(dir, HeadFile), []byte("junk\n"), 0o644)
	if _, err := r.Load(""); err == nil || !strings.Contains(err.Error(), "HEAD holds") {
		t.Fatalf("load with a junk HEAD: %v", err)
	}
	if _, err := Open(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "no such repository") {
		t.Fatalf("open of a missing dir: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a .forge repository") {
		t.Fatalf("open of an empty dir: %v", err)
	}
}

// TestMissingShardIsWrittenAgain: a commit does not reuse the parent's
// bytes from a shard that is gone; the new revision is whole.
func TestMissingShardIsWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	if _, err := CommitTo(dir, Commit{Tensors: model(1)}); err != nil {
		t.Fatal(err)
	}
	r, _ := Open(dir)
	s, _ := r.Load("")
	os.Remove(filepath.Join(dir, ShardDir, s.Manifest.Tensors[0].Parts[0].Shard+shardExt))
	s.Close()
	st, err := CommitTo(dir, Commit{Tensors: model(1)})
	if err != nil {
		t.Fatal(err)
	}
	if st.Written != len(model(1))-1 { // all but the empty tensor
		t.Fatalf("wrote %d blobs, want every tensor again: %+v", st.Written, st)
	}
	s, err = r.Load("")
	if err != nil {
		t.Fatal(err)
	}
	sameTensors(t, s.Tensors(), model(1))
	s.Close()
}

func TestSecondWriterRefused(t *testing.T) {
	dir := t.TempDir()
	if _, err := CommitTo(dir, Commit{Tensors: model(1)}); err != nil {
		t.Fatal(err)
	}
	l, err := lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = CommitTo(dir, Commit{Tensors: model(2)})
	unlock(l)
	if err == nil || !strings.Contains(err.Error(), "being written by pid") {
		t.Fatalf("second writer: %v", err)
	}
	if _, err := CommitTo(dir, Commit{Tensors: model(2)}); err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
}

// TestKillAtAnyMoment commits in a child process and SIGKILLs it at
// random moments: HEAD must always load a complete revision, either the
// one before or a new one, and every revision must verify.
func TestKillAtAnyMoment(t *testing.T) {
	if dir := os.Getenv("FMODEL_COMMIT_CHILD"); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv("FMODEL_COMMIT_SEED"), 10, 64)
		for i := seed; ; i++ {
			ts := model(1)
			ts[1] = tensorOf("blocks.0.w", i, 300, 301) // ~360 KB changes every commit
			if _, err := CommitTo(dir, Commit{Tensors: ts, Message: fmt.Sprint(i)}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	if _, err := CommitTo(dir, Commit{Tensors: model(1), Message: "base"}); err != nil {
		t.Fatal(err)
	}
	r, _ := Open(dir)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillAtAnyMoment$")
		cmd.Env = append(os.Environ(), "FMODEL_COMMIT_CHILD="+dir, fmt.Sprintf("FMODEL_COMMIT_SEED=%d", 1000*(round+1)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		s, err := r.Load("")
		if err != nil {
			t.Fatalf("round %d: HEAD does not load after a kill: %v", round, err)
		}
		for _, x := range s.Tensors() {
			want := s.Manifest.Tensors[0].SHA256
			for _, e := range s.Manifest.Tensors {
				if e.Name == x.Name {
					want = e.SHA256
				}
			}
			if fmt.Sprintf("%x", sha256.Sum256(x.Data)) != want {
				t.Fatalf("round %d: %s does not match its hash after a kill", round, x.Name)
			}
		}
		s.Close()
	}
	log, err := r.Log("")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.Verify()
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	t.Logf("%d revisions after 8 kills; %d shards", len(log), rep.Shards)
	// The next commit clears what the killed ones left half-written.
	if _, err := CommitTo(dir, Commit{Tensors: model(1)}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"", ManifestDir, ShardDir} {
		ents, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range ents {
			if atomicfile.IsTemp(e.Name()) {
				t.Errorf("leftover %s", filepath.Join(sub, e.Name()))
			}
		}
	}
}

func TestParseManifestRefuses(t *testing.T) {
	h := strings.Repeat("ab", 32)
	good := func() Manifest {
		return Manifest{Format: Format, Version: Version, Tensors: []Entry{{
			Blob: Blob{Name: "w", Size: 8, SHA256: h, Parts: []Part{{Shard: h, Offset: 0, Length: 8}}}, DType: "F32", Shape: []int{2}}}}
	}
	enc := func(m Manifest) []byte { b, _ := json.Marshal(m); return b }
	if _, err := ParseManifest(enc(good())); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*Manifest){
		"format":       func(m *Manifest) { m.Format = "x" },
		"version":      func(m *Manifest) { m.Version = 2 },
		"parent":       func(m *Manifest) { m.Parent = "abc" },
		"size":         func(m *Manifest) { m.Tensors[0].Shape = []int{3} },
		"dtype":        func(m *Manifest) { m.Tensors[0].DType = "F33" },
		"negative":     func(m *Manifest) { m.Tensors[0].Shape = []int{-2} },
		"offset":       func(m *Manifest) { m.Tensors[0].Parts[0].Offset = 8 },
		"parts":        func(m *Manifest) { m.Tensors[0].Parts[0].Length = 4 },
		"no parts":     func(m *Manifest) { m.Tensors[0].Parts = nil },
		"shard name":   func(m *Manifest) { m.Tensors[0].Parts[0].Shard = "../../etc/passwd" },
		"hash":         func(m *Manifest) { m.Tensors[0].SHA256 = "x" },
		"duplicate":    func(m *Manifest) { m.Tensors = append(m.Tensors, m.Tensors[0]) },
		"no name":      func(m *Manifest) { m.Tensors[0].Name = "" },
		"huge part":    func(m *Manifest) { m.Tensors[0].Parts[0].Offset = 1 << 40 },
		"overflow":     func(m *Manifest) { m.Tensors[0].Shape = []int{1 << 62, 1 << 62} },
		"config":       func(m *Manifest) { m.Config = json.RawMessage("{") },
		"huge length":  func(m *Manifest) { m.Tensors[0].Parts[0].Length = 1 << 62; m.Tensors[0].Size = 1 << 62 },
		"negative len": func(m *Manifest) { m.Tensors[0].Parts = append(m.Tensors[0].Parts, Part{Shard: h, Length: -8}) },
	}
	for name, f := range cases {
		m := good()
		f(&m)
		b := enc(m)
		if name == "config" {
			b = bytes.Replace(b, []byte(`"tensors"`), []byte(`"config":{,"tensors"`), 1)
		}
		if _, err := ParseManifest(b); err == nil {
			t.Errorf("%s: accepted %s", name, b)
		}
	}
	if _, err := ParseManifest([]byte(`{"format":"forge-model","version":1,"tensors":[],"extra":1}`)); err == nil {
		t.Error("unknown field accepted")
	}
}
