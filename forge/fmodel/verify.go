package fmodel

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// VerifyReport is what Verify found.
type VerifyReport struct {
	Revisions, Shards, Blobs int
	Bytes                    int64 // shard bytes hashed
	Problems                 []string
}

// Verify re-hashes every shard (its name is its content's hash) and every
// blob of every stored revision (tensors and files against their recorded
// hashes), and checks that HEAD names a readable revision. Problems are
// collected, not fatal; the error is for a repository it cannot read at all.
func (r *Repo) Verify() (*VerifyReport, error) {
	rep := &VerifyReport{}
	problem := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	ents, err := os.ReadDir(filepath.Join(r.Dir, ShardDir))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("fmodel: %v", err)
	}
	good := map[string]bool{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), shardExt)
		if !ok || !isHash(name) {
			continue // temporaries of an interrupted commit, or not ours
		}
		path := filepath.Join(r.Dir, ShardDir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			problem("shard %s: %v", short(name), err)
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		rep.Shards++
		rep.Bytes += n
		switch {
		case err != nil:
			problem("shard %s: reading: %v", short(name), err)
		case hexHash([32]byte(h.Sum(nil))) != name:
			problem("shard %s is damaged: its bytes do not hash to its name", short(name))
		case n%PageSize != 0:
			problem("shard %s: %d bytes is not a whole number of %d-byte pages", short(name), n, PageSize)
		default:
			good[name] = true
		}
	}
	revs, err := r.Revisions()
	if err != nil {
		return nil, err
	}
	checked := map[string]bool{}
	for _, h := range revs {
		rep.Revisions++
		s, err := r.Load(h)
		if err != nil {
			problem("revision %s: %v", short(h), err)
			continue
		}
		blobs := append([]Blob{}, s.Manifest.Files...)
		for _, e := range s.Manifest.Tensors {
			blobs = append(blobs, e.Blob)
		}
		for _, b := range blobs {
			if checked[b.SHA256] {
				continue
			}
			bad := false
			for _, p := range b.Parts {
				if !good[p.Shard] {
					problem("revision %s: %q is in shard %s, which is damaged", short(h), b.Name, short(p.Shard))
					bad = true
					break
				}
			}
			if bad {
				continue
			}
			rep.Blobs++
			if hexHash(sha256.Sum256(s.bytesOf(b))) != b.SHA256 {
				problem("revision %s: %q does not match its hash", short(h), b.Name)
				continue
			}
			checked[b.SHA256] = true
		}
		s.Close()
	}
	if head, err := r.Head(); err != nil {
		problem("%v", err)
	} else if _, err := r.Manifest(head); err != nil {
		problem("HEAD: %v", err)
	}
	return rep, nil
}
