package fmodel

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseManifest: any bytes either parse into a manifest that
// validates and survives a round trip, or give an error; never a panic.
func FuzzParseManifest(f *testing.F) {
	h := strings.Repeat("0f", 32)
	f.Add([]byte(`{"format":"forge-model","version":1,"message":"m","time":"2026-01-01T00:00:00Z","tensors":[{"name":"w","size":8,"sha256":"` + h + `","parts":[{"shard":"` + h + `","offset":0,"length":8}],"dtype":"F32","shape":[2]}]}`))
	f.Add([]byte(`{"format":"forge-model","version":1,"tensors":[],"files":[{"name":"t","size":0,"sha256":"` + h + `","parts":[]}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(out); err != nil {
			t.Fatalf("a parsed manifest does not parse again: %v\n%s", err, out)
		}
	})
}

// FuzzLoad: a repository whose manifest and shard are arbitrary loads,
// reads its tensors and verifies without panicking or reading outside
// the shard.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	if _, err := CommitTo(dir, Commit{Tensors: model(1)[:2], Files: map[string][]byte{"tokenizer.json": []byte("{}")}}); err != nil {
		f.Fatal(err)
	}
	r, _ := Open(dir)
	h, _ := r.Head()
	mb, _ := os.ReadFile(filepath.Join(dir, ManifestDir, h+manifestExt))
	s, _ := r.Load("")
	shard := s.Manifest.Tensors[0].Parts[0].Shard
	s.Close()
	sb, _ := os.ReadFile(filepath.Join(dir, ShardDir, shard+shardExt))
	f.Add(mb, sb[:PageSize])
	f.Add(mb, sb[:100])
	d := f.TempDir()
	f.Fuzz(func(t *testing.T, manifest, shardBytes []byte) {
		os.RemoveAll(filepath.Join(d, ManifestDir))
		os.RemoveAll(filepath.Join(d, ShardDir))
		os.MkdirAll(filepath.Join(d, ManifestDir), 0o755)
		os.MkdirAll(filepath.Join(d, ShardDir), 0o755)
		// The manifest is stored under its own hash, so only the parser
		// and the bounds checks stand between it and the reader; every
		// shard it could name is the fuzzed one.
		mh := hexHash(sha256.Sum256(manifest))
		os.WriteFile(filepath.Join(d, ManifestDir, mh+manifestExt), manifest, 0o644)
		os.WriteFile(filepath.Join(d, HeadFile), []byte(mh+"\n"), 0o644)
		if m, err := ParseManifest(manifest); err == nil {
			for _, e := range m.Tensors {
				for _, p := range e.Parts {
					os.WriteFile(filepath.Join(d, ShardDir, p.Shard+shardExt), shardBytes, 0o644)
				}
			}
			for _, fl := range m.Files {
				for _, p := range fl.Parts {
					os.WriteFile(filepath.Join(d, ShardDir, p.Shard+shardExt), shardBytes, 0o644)
				}
			}
		}
		r := &Repo{Dir: d}
		if s, err := r.Load(""); err == nil {
			for _, x := range s.Tensors() {
				_ = len(x.Data)
			}
			for _, fl := range s.Manifest.Files {
				s.File(fl.Name)
			}
			s.Close()
		}
		r.Verify()
		r.Log("")
	})
}
