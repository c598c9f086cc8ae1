package fmodel

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/forgeml/forge/forge/safetensors"
)

// Snapshot is one revision loaded for reading. Its tensors' bytes alias
// the mapped shards (a tensor split across shards is the exception: it is
// assembled in memory); they are valid until Close.
type Snapshot struct {
	Hash     string
	Manifest *Manifest
	Copied   int // tensors that had to be assembled from several parts
	shards   map[string]*region
}

// region is one mapped shard. Once lent (Snapshot.Lend) it is unmapped by
// a cleanup when it becomes unreachable, not by Close.
type region struct {
	b     []byte
	unmap func() error
	lent  bool
}

// Load maps the shards of revision rev (see Resolve) and checks that every
// part lies inside its shard. It does not re-hash the bytes (Verify does):
// shards are only ever renamed into place complete.
func (r *Repo) Load(rev string) (*Snapshot, error) {
	h, err := r.Resolve(rev)
	if err != nil {
		return nil, err
	}
	m, err := r.Manifest(h)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Hash: h, Manifest: m, shards: map[string]*region{}}
	check := func(kind, name string, b Blob) error {
		for _, p := range b.Parts {
			var data []byte
			if rg, ok := s.shards[p.Shard]; ok {
				data = rg.b
			} else {
				path := filepath.Join(r.Dir, ShardDir, p.Shard+shardExt)
				d, unmap, err := mapFile(path)
				if err != nil {
					if errors.Is(err, os.ErrNotExist) {
						return fmt.Errorf("fmodel: %s: revision %s needs shard %s, which is missing (run `forge model verify %s`)", r.Dir, short(h), short(p.Shard), r.Dir)
					}
					return fmt.Errorf("fmodel: %v", err)
				}
				s.shards[p.Shard], data = &region{b: d, unmap: unmap}, d
			}
			if p.Offset+p.Length > int64(len(data)) {
				return fmt.Errorf("fmodel: %s: %s %q reaches byte %d of shard %s, which has %d: the shard is truncated or the manifest damaged", r.Dir, kind, name, p.Offset+p.Length, short(p.Shard), len(data))
			}
		}
		return nil
	}
	for _, e := range m.Tensors {
		if err := check("tensor", e.Name, e.Blob); err != nil {
			s.Close()
			return nil, err
		}
		if len(e.Parts) > 1 {
			s.Copied++
		}
	}
	for _, f := range m.Files {
		if err := check("file", f.Name, f); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// bytesOf returns a blob's bytes: a slice of the mapping for one part, a
// new buffer for several.
func (s *Snapshot) bytesOf(b Blob) []byte {
	switch len(b.Parts) {
	case 0:
		return []byte{}
	case 1:
		p := b.Parts[0]
		return s.shards[p.Shard].b[p.Offset : p.Offset+p.Length : p.Offset+p.Length]
	}
	out := make([]byte, 0, b.Size)
	for _, p := range b.Parts {
		out = append(out, s.shards[p.Shard].b[p.Offset:p.Offset+p.Length]...)
	}
	return out
}

// Tensors returns every tensor of the revision in manifest order.
func (s *Snapshot) Tensors() []safetensors.Tensor {
	out := make([]safetensors.Tensor, len(s.Manifest.Tensors))
	for i, e := range s.Manifest.Tensors {
		out[i] = safetensors.Tensor{Name: e.Name, DType: e.DType, Shape: append([]int{}, e.Shape...), Data: s.bytesOf(e.Blob)}
	}
	return out
}

// File returns a copy of the auxiliary file name, checked against its
// hash (files are small).
func (s *Snapshot) File(name string) ([]byte, error) {
	for _, f := range s.Manifest.Files {
		if f.Name == name {
			b := append([]byte(nil), s.bytesOf(f)...)
			if hexHash(sha256.Sum256(b)) != f.SHA256 {
				return nil, fmt.Errorf("fmodel: revision %s: file %s does not match its hash (run `forge model verify`)", short(s.Hash), name)
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("fmodel: revision %s has no file %s", short(s.Hash), name)
}

// Lend returns the bytes of tensor i (in manifest order) for use beyond
// Close, in place: mem is a slice of the mapped shard, starting on a page
// of the shard (PageSize) and with its capacity reaching the end of its
// last page where the shard has it, so a device can take the pages as its
// memory (forge's Tensor.AliasBytes). keep owns the mapping: the shard is
// unmapped once Close has been called and keep is unreachable. ok is false
// for a tensor stored in several parts, which has no single run of bytes
// (Tensors assembles it), and after Close.
func (s *Snapshot) Lend(i int) (mem []byte, keep any, ok bool) {
	e := s.Manifest.Tensors[i]
	if len(e.Parts) != 1 || s.shards == nil {
		return nil, nil, false
	}
	p := e.Parts[0]
	rg := s.shards[p.Shard]
	end := min(pageUp(p.Offset+p.Length), int64(len(rg.b)))
	if !rg.lent {
		rg.lent = true
		runtime.AddCleanup(rg, func(unmap func() error) { unmap() }, rg.unmap)
	}
	return rg.b[p.Offset : p.Offset+p.Length : end], rg, true
}

// Close unmaps the shards no tensor was lent from (Lend); the bytes of
// Tensors and File are invalid afterwards.
func (s *Snapshot) Close() error {
	var first error
	for _, rg := range s.shards {
		if rg.lent {
			continue
		}
		if err := rg.unmap(); err != nil && first == nil {
			first = err
		}
	}
	s.shards = nil
	return first
}
