package dataset

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/parquet-go/parquet-go"
)

type row struct {
	ID   int64  `parquet:"id"`
	Text string `parquet:"text,optional"`
}

// writeParquet writes rows of text to path in row groups of 50.
func writeParquet(t testing.TB, path string, texts []string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[row](f, parquet.MaxRowsPerRowGroup(50), parquet.Compression(&parquet.Snappy))
	for i, s := range texts {
		if _, err := w.Write([]row{{ID: int64(i), Text: s}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// corpus returns n documents whose words say which source they are from.
func corpus(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s document %d: the quick brown fox jumps over the lazy dog, %s again and again.", tag, i, tag)
	}
	return out
}

func docs(t *testing.T, s *Source) []string {
	t.Helper()
	var out []string
	if err := s.Documents(context.Background(), func(d string) error { out = append(out, d); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLocalSources(t *testing.T) {
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "p.parquet"), corpus("pq", 120))
	var jl strings.Builder
	for i, d := range corpus("jl", 30) {
		b, _ := json.Marshal(map[string]any{"content": d, "id": i})
		jl.Write(append(b, '\n'))
	}
	os.WriteFile(filepath.Join(dir, "j.jsonl"), []byte(jl.String()), 0o644)
	os.MkdirAll(filepath.Join(dir, "texts"), 0o755)
	os.WriteFile(filepath.Join(dir, "texts", "a.txt"), []byte("alpha text\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "texts", "b.txt"), []byte("beta text\n"), 0o644)

	s, err := ParseSource(filepath.Join(dir, "p.parquet")+":0.7", "")
	if err != nil || s.Kind != KindParquet || s.Weight != 0.7 {
		t.Fatalf("%+v %v", s, err)
	}
	if d := docs(t, s); len(d) != 120 || d[119] != corpus("pq", 120)[119] {
		t.Fatalf("parquet: %d documents", len(d))
	}
	s, _ = ParseSource(filepath.Join(dir, "j.jsonl"), "content")
	if d := docs(t, s); len(d) != 30 || d[3] != corpus("jl", 30)[3] {
		t.Fatalf("jsonl: %v", d)
	}
	s, _ = ParseSource(filepath.Join(dir, "texts"), "")
	if d := docs(t, s); len(d) != 2 || d[1] != "beta text\n" {
		t.Fatalf("dir: %q", d)
	}
	s, _ = ParseSource(filepath.Join(dir, "texts", "*.txt"), "")
	if s.Kind != KindText || len(s.Paths) != 2 {
		t.Fatalf("glob: %+v", s)
	}
}

// TestBadInput: each problem is one line naming the source.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(content), 0o644)
		return p
	}
	writeParquet(t, filepath.Join(dir, "ok.parquet"), corpus("x", 3))
	pq, _ := os.ReadFile(filepath.Join(dir, "ok.parquet"))
	cases := []struct {
		spec, field, want string
	}{
		{write("junk.parquet", "this is not parquet at all, just bytes"), "", "junk.parquet: not a readable Parquet file"},
		{write("cut.parquet", string(pq[:len(pq)/2])), "", "cut.parquet: not a readable Parquet file"},
		{filepath.Join(dir, "ok.parquet"), "body", `ok.parquet has no column "body" (columns: id, text)`},
		{filepath.Join(dir, "ok.parquet"), "id", `column "id" holds INT64, not text`},
		{write("m.jsonl", `{"text": "a"}`+"\n"+`{"body": "b"}`+"\n"), "", `m.jsonl:2: no field "text" (the line has "body")`},
		{write("bad.jsonl", "{\"text\": \"a\"}\n[1, 2]\n"), "", "bad.jsonl:2: not a JSON object"},
		{write("latin.jsonl", "{\"text\": \"caf\xe9\"}\n"), "", "latin.jsonl:1: the line is not UTF-8"},
		{write("latin.txt", "fine\ncaf\xe9\n"), "", "latin.txt: line 2 is not UTF-8"},
		{write("empty.jsonl", "\n\n"), "", "empty.jsonl: the source is empty"},
		{write("empty.txt", ""), "", "empty.txt: the source is empty"},
		{filepath.Join(dir, "none.txt"), "", "none.txt: no such file"},
		{filepath.Join(dir, "*.nothing"), "", "matches no files"},
		{filepath.Join(dir, "ok.parquet") + ":0", "", "weight 0 must be a positive number"},
		{filepath.Join(dir, "ok.parquet") + ":-2", "", "weight -2 must be a positive number"},
		{"hf:justaname", "", "want hf:org/name"},
	}
	for _, c := range cases {
		err := func() error {
			s, err := ParseSource(c.spec, c.field)
			if err != nil {
				return err
			}
			return s.Documents(context.Background(), func(string) error { return nil })
		}()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want one line containing %q", filepath.Base(c.spec), err, c.want)
		}
	}
	if _, err := ParseMix("fineweb-edu:0.6,nosuch:0.4"); err == nil || !strings.Contains(err.Error(), `no preset "nosuch"`) {
		t.Errorf("unknown preset: %v", err)
	}
	if _, err := ParseMix("fineweb-edu:0"); err == nil || !strings.Contains(err.Error(), "positive") {
		t.Errorf("zero weight: %v", err)
	}
	if s, err := ParseMix("smollm-web:2,dclm:1"); err != nil || len(s) != 4 || s[0].Weight+s[1].Weight+s[2].Weight != 2 {
		t.Errorf("mixture preset: %v %v", s, err)
	}
}

// hubServer serves a dataset the way the hub lays it out: the list of
// Parquet URLs at /api/datasets/{repo}/parquet/{config}/{split} and the
// files under it. It requires the token when token != "", drops the
// connection in the middle of each file's first transfer, and counts
// requests.
type hubServer struct {
	*httptest.Server
	files    map[string][]byte // path → content
	token    string
	dropped  map[string]bool
	requests atomic.Int64
}

func newHub(t *testing.T, repo, config, split string, parts [][]string, token string) *hubServer {
	h := &hubServer{files: map[string][]byte{}, token: token, dropped: map[string]bool{}}
	dir := t.TempDir()
	var urls []string
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		if h.token != "" && r.Header.Get("Authorization") != "Bearer "+h.token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		list := fmt.Sprintf("/api/datasets/%s/parquet/%s/%s", repo, config, split)
		if r.URL.Path == list {
			json.NewEncoder(w).Encode(urls)
			return
		}
		b, ok := h.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if !h.dropped[r.URL.Path] && r.Header.Get("Range") == "" {
			// Promise the whole file, send half, and hang up.
			h.dropped[r.URL.Path] = true
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.WriteHeader(http.StatusOK)
			w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		http.ServeContent(w, r, "f.parquet", fakeTime, strings.NewReader(string(b)))
	}))
	t.Cleanup(h.Close)
	for i, texts := range parts {
		p := filepath.Join(dir, fmt.Sprintf("%d.parquet", i))
		writeParquet(t, p, texts)
		b, _ := os.ReadFile(p)
		path := fmt.Sprintf("/api/datasets/%s/parquet/%s/%s/%d.parquet", repo, config, split, i)
		h.files[path] = b
		urls = append(urls, h.URL+path)
	}
	return h
}

func testHub(t *testing.T, h *hubServer, token string) *Hub {
	return &Hub{Endpoint: h.URL, Token: token, Cache: t.TempDir(), HFCache: t.TempDir(), Retries: 3}
}

func TestHubDownloadResumes(t *testing.T) {
	parts := [][]string{corpus("hubA", 200), corpus("hubB", 150)}
	h := newHub(t, "org/set", "default", "train", parts, "sekrit")
	hub := testHub(t, h, "sekrit")
	var log strings.Builder
	hub.Log = &log
	s, _ := ParseSource("hf:org/set", "")
	s.hub = hub
	d := docs(t, s)
	if len(d) != 350 || d[0] != parts[0][0] || d[349] != parts[1][149] {
		t.Fatalf("%d documents", len(d))
	}
	if strings.Count(log.String(), "connection dropped") != 2 {
		t.Errorf("expected two resumed downloads:\n%s", log.String())
	}
	// A second read uses the complete downloads, without the network.
	before := h.requests.Load()
	if d := docs(t, s); len(d) != 350 || h.requests.Load() != before {
		t.Errorf("the second read made %d requests", h.requests.Load()-before)
	}
	// A .part left by a killed process is resumed with a range request.
	hub2 := testHub(t, h, "sekrit")
	dst := filepath.Join(hub2.Cache, "datasets", "org", "set", "default", "train")
	os.MkdirAll(dst, 0o755)
	first := h.files["/api/datasets/org/set/parquet/default/train/0.parquet"]
	os.WriteFile(filepath.Join(dst, "0000.parquet.part"), first[:100], 0o644)
	s.hub = hub2
	if d := docs(t, s); len(d) != 350 {
		t.Fatalf("after resuming a part file: %d documents", len(d))
	}
}

// TestHubPartialDownload: a read that failed after some files were
// downloaded does not leave a set that later reads take as complete.
func TestHubPartialDownload(t *testing.T) {
	parts := [][]string{corpus("p0", 200), corpus("p1", 150)}
	h := newHub(t, "org/part", "default", "train", parts, "")
	second := "/api/datasets/org/part/parquet/default/train/1.parquet"
	good := h.files[second]
	delete(h.files, second) // the second file is missing for now: 404
	hub := testHub(t, h, "")
	s, _ := ParseSource("hf:org/part", "")
	s.hub = hub
	if err := s.Documents(context.Background(), func(string) error { return nil }); err == nil {
		t.Fatal("a missing file was not an error")
	}
	h.files[second] = good
	if d := docs(t, s); len(d) != 350 {
		t.Fatalf("after the failed read: %d documents, want 350", len(d))
	}
}

func TestHubRefusals(t *testing.T) {
	h := newHub(t, "org/gated", "default", "train", [][]string{corpus("g", 10)}, "right")
	s, _ := ParseSource("hf:org/gated", "")
	s.hub = testHub(t, h, "wrong")
	err := s.Documents(context.Background(), func(string) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "HF_TOKEN") || strings.Contains(err.Error(), "\n") {
		t.Errorf("401: %v", err)
	}
	s, _ = ParseSource("hf:org/gated/other@test", "")
	s.hub = testHub(t, h, "right")
	err = s.Documents(context.Background(), func(string) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `no config "other", split "test"`) {
		t.Errorf("404: %v", err)
	}
	s.hub = &Hub{Endpoint: "http://127.0.0.1:1", Cache: t.TempDir(), HFCache: t.TempDir()}
	if err := s.Documents(context.Background(), func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "cannot reach the hub") {
		t.Errorf("unreachable: %v", err)
	}
	s.hub.Offline = true
	if err := s.Documents(context.Background(), func(string) error { return nil }); err == nil || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Errorf("offline: %v", err)
	}
}

// TestHubCache reads a dataset from a Hugging Face cache directory laid
// out as huggingface_hub leaves it, with no server at all.
func TestHubCache(t *testing.T) {
	cache := t.TempDir()
	repo := filepath.Join(cache, "datasets--org--local")
	snap := filepath.Join(repo, "snapshots", "abc123")
	writeParquet(t, filepath.Join(snap, "data", "train-00000-of-00002.parquet"), corpus("c0", 20))
	writeParquet(t, filepath.Join(snap, "data", "train-00001-of-00002.parquet"), corpus("c1", 20))
	writeParquet(t, filepath.Join(snap, "data", "test-00000-of-00001.parquet"), corpus("test", 5))
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("abc123"), 0o644)
	s, _ := ParseSource("hf:org/local", "")
	s.hub = &Hub{Endpoint: "http://127.0.0.1:1", HFCache: cache, Offline: true}
	d := docs(t, s)
	if len(d) != 40 || !strings.HasPrefix(d[0], "c0 ") || !strings.HasPrefix(d[39], "c1 ") {
		t.Fatalf("%d documents: %q…", len(d), d[0])
	}
	s, _ = ParseSource("hf:org/local@test", "")
	s.hub = &Hub{HFCache: cache, Offline: true}
	if d := docs(t, s); len(d) != 5 {
		t.Fatalf("test split: %d documents", len(d))
	}
}

// TestPrepareMixture prepares a weighted mixture of three kinds of
// source with a tokenizer trained on a sample, in small shards, and
// checks the files, the report and the weights.
func TestPrepareMixture(t *testing.T) {
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "a.parquet"), corpus("alpha", 3000))
	var jl strings.Builder
	for _, d := range corpus("beta", 3000) {
		b, _ := json.Marshal(map[string]string{"text": d})
		jl.Write(append(b, '\n'))
	}
	os.WriteFile(filepath.Join(dir, "b.jsonl"), []byte(jl.String()), 0o644)
	a, _ := ParseSource(filepath.Join(dir, "a.parquet")+":3", "")
	b, _ := ParseSource(filepath.Join(dir, "b.jsonl")+":1", "")
	out := filepath.Join(dir, "out")
	var progress []Progress
	rep, err := Prepare(context.Background(), []*Source{a, b}, out, Options{
		Vocab: 300, SampleBytes: 20000, ShardTokens: 5000, Context: 16, ChunkBytes: 4096, Workers: 2,
		Progress: func(p Progress) { progress = append(progress, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := data.VerifyManifest(out); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(filepath.Join(out, TokenizerFile))
	if err != nil || tok.VocabSize() != 300 || rep.SampleBytes < 20000 || rep.SampleBytes > 21000 {
		t.Fatalf("tokenizer: %v, sample %d", err, rep.SampleBytes)
	}
	// alpha's documents are as long as beta's: 3:1 by bytes until alpha runs out.
	sa, sb := rep.Sources[0], rep.Sources[1]
	if rep.Exhausted != a.Name || sa.Documents != 3000 || math.Abs(float64(sa.Bytes)/float64(sb.Bytes)-3) > 0.01 {
		t.Fatalf("report: %+v", rep)
	}
	if sa.Tokens+sb.Tokens != rep.TrainTokens+rep.ValTokens {
		t.Fatalf("tokens per source %d + %d != %d + %d", sa.Tokens, sb.Tokens, rep.TrainTokens, rep.ValTokens)
	}
	// Shards: every one full but the last of each split; together they
	// decode to the documents in order.
	var all []int
	for _, split := range []string{TrainDir, ValDir} {
		files, err := data.ShardFiles(filepath.Join(out, split))
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range files {
			ids, err := data.ReadTokens(f)
			if err != nil {
				t.Fatal(err)
			}
			if i < len(files)-1 && len(ids) != 5000 {
				t.Errorf("%s has %d tokens, want 5000", f, len(ids))
			}
			if split == TrainDir {
				for _, id := range ids {
					all = append(all, int(id))
				}
			}
		}
		if split == TrainDir && len(files) != rep.TrainShards || split == ValDir && len(files) != rep.ValShards {
			t.Errorf("%s: %d files, report %d/%d", split, len(files), rep.TrainShards, rep.ValShards)
		}
	}
	if frac := float64(rep.ValTokens) / float64(rep.TrainTokens+rep.ValTokens); frac < 0.08 || frac > 0.12 {
		t.Errorf("validation share %.3f", frac)
	}
	text := tok.Decode(all[:200])
	if !strings.HasPrefix(text, "alpha document 0: ") || !strings.Contains(text, "\n\n") {
		t.Errorf("the train split starts %q", text)
	}
	if len(progress) == 0 || !progress[len(progress)-1].Done {
		t.Errorf("progress: %+v", progress)
	}
	// Deterministic: the same inputs give the same files.
	rep2, err := Prepare(context.Background(), []*Source{a, b}, filepath.Join(dir, "out2"), Options{
		Vocab: 300, SampleBytes: 20000, ShardTokens: 5000, Context: 16, ChunkBytes: 4096, Workers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(filepath.Join(out, TrainDir, "000001.bin"))
	y, _ := os.ReadFile(filepath.Join(dir, "out2", TrainDir, "000001.bin"))
	if string(x) != string(y) || rep2.TrainTokens != rep.TrainTokens {
		t.Error("one worker and two give different shards")
	}
	// A loader trains across the shards.
	l, err := data.OpenLoader(filepath.Join(out, TrainDir), 2, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	l.Next()
	l.Close()
}

var fakeTime time.Time
