package fmodel

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/forgeml/forge/forge/safetensors"
	"github.com/forgeml/forge/internal/atomicfile"
)

// Commit is what a save writes: tensors, auxiliary files and what
// describes them.
type Commit struct {
	Tensors []safetensors.Tensor
	Files   map[string][]byte // e.g. "tokenizer.json"
	Config  json.RawMessage   // the config as JSON, or nil
	Meta    map[string]string
	Message string
	Time    time.Time // zero: now
}

// CommitStats reports what a commit wrote.
type CommitStats struct {
	Hash         string // the new revision
	Parent       string // "" for the first
	Tensors      int    // tensors in the revision
	Written      int    // tensors and files whose bytes were written (the rest came from the parent)
	Reused       int
	Shards       int   // shards written
	BytesWritten int64 // shard bytes written, padding included
	Bytes        int64 // bytes of the revision's tensors
}

// shardLimit is the most a shard holds; a variable so that tests can
// exercise splitting without 95 MB tensors.
var shardLimit int64 = MaxShardBytes / PageSize * PageSize

// CommitTo saves c as a new revision of the repository in dir (created if
// it does not exist), with the current revision as its parent, and makes
// it the current one. Only bytes the parent does not hold are written.
func CommitTo(dir string, c Commit) (CommitStats, error) {
	var st CommitStats
	for _, sub := range []string{ManifestDir, ShardDir} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return st, fmt.Errorf("fmodel: creating %s: %v", dir, err)
		}
	}
	l, err := lock(dir)
	if err != nil {
		return st, err
	}
	defer unlock(l)
	removeTemps(dir)
	r := &Repo{Dir: dir}
	known := map[string]Blob{} // the parent's blobs by content hash
	if _, err := os.Stat(filepath.Join(dir, HeadFile)); err == nil {
		h, err := r.Head()
		if err != nil {
			return st, err
		}
		pm, err := r.Manifest(h)
		if err != nil {
			return st, fmt.Errorf("%v; the new revision needs its parent (check out a readable one first)", err)
		}
		st.Parent = h
		for _, e := range pm.Tensors {
			known[e.SHA256] = e.Blob
		}
		for _, f := range pm.Files {
			known[f.SHA256] = f
		}
	}

	m := &Manifest{Format: Format, Version: Version, Parent: st.Parent, Message: c.Message, Time: c.Time, Config: c.Config, Meta: c.Meta}
	if m.Time.IsZero() {
		m.Time = time.Now().UTC().Truncate(time.Second)
	}
	if len(c.Config) > 0 && !json.Valid(c.Config) {
		return st, errors.New("fmodel: the config to commit is not valid JSON")
	}
	var pending []*pendingBlob
	fresh := map[string]*pendingBlob{}
	add := func(name string, data []byte) *Blob {
		sum := hexHash(sha256.Sum256(data))
		b := &Blob{Name: name, Size: int64(len(data)), SHA256: sum}
		if old, ok := known[sum]; ok && old.Size == b.Size && partsPresent(dir, old.Parts) {
			b.Parts = old.Parts
			st.Reused++
			return b
		}
		if p, ok := fresh[sum]; ok { // the same bytes twice in this commit
			p.users = append(p.users, b)
			return b
		}
		p := &pendingBlob{data: data, users: []*Blob{b}}
		fresh[sum] = p
		pending = append(pending, p)
		st.Written++
		return b
	}
	names := map[string]bool{}
	m.Tensors = make([]Entry, len(c.Tensors))
	blobs := make([]*Blob, 0, len(c.Tensors)+len(c.Files))
	for i, t := range c.Tensors {
		if names[t.Name] {
			return st, fmt.Errorf("fmodel: tensor %q is given twice", t.Name)
		}
		names[t.Name] = true
		n, err := byteSize(t.DType, t.Shape)
		if err != nil || n != int64(len(t.Data)) {
			return st, fmt.Errorf("fmodel: tensor %q: dtype %s shape %v does not match its %d bytes", t.Name, t.DType, t.Shape, len(t.Data))
		}
		m.Tensors[i] = Entry{DType: t.DType, Shape: append([]int{}, t.Shape...)}
		blobs = append(blobs, add(t.Name, t.Data))
	}
	fileNames := make([]string, 0, len(c.Files))
	for n := range c.Files {
		fileNames = append(fileNames, n)
	}
	sort.Strings(fileNames)
	for _, n := range fileNames {
		blobs = append(blobs, add(n, c.Files[n]))
	}

	for _, sh := range packShards(pending) {
		name, written, err := writeShard(dir, sh)
		if err != nil {
			return st, err
		}
		st.Shards++
		st.BytesWritten += written
		for _, pc := range sh.pieces {
			pc.blob.parts = append(pc.blob.parts, Part{Shard: name, Offset: pc.offset, Length: int64(len(pc.data))})
		}
	}
	for _, p := range pending {
		for _, u := range p.users {
			u.Parts = p.parts
		}
	}
	for i := range c.Tensors {
		m.Tensors[i].Blob = *blobs[i]
	}
	for _, b := range blobs[len(c.Tensors):] {
		m.Files = append(m.Files, *b)
	}
	if err := m.validate(); err != nil {
		return st, fmt.Errorf("fmodel: internal error: the new manifest is invalid: %v", err)
	}
	mb, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return st, fmt.Errorf("fmodel: %v", err)
	}
	mb = append(mb, '\n')
	st.Hash = hexHash(sha256.Sum256(mb))
	mpath := filepath.Join(dir, ManifestDir, st.Hash+manifestExt)
	if err := atomicfile.WriteBytes(mpath, mb); err != nil {
		return st, fmt.Errorf("fmodel: writing %s: %v", mpath, err)
	}
	// HEAD last: until this rename the previous revision is current.
	if err := atomicfile.WriteBytes(filepath.Join(dir, HeadFile), []byte(st.Hash+"\n")); err != nil {
		return st, fmt.Errorf("fmodel: writing %s: %v", filepath.Join(dir, HeadFile), err)
	}
	st.Tensors = len(m.Tensors)
	st.Bytes = m.Bytes()
	return st, nil
}

// partsPresent reports whether the shards holding parts are there and
// long enough: a parent whose shard went missing must not lend it to a
// new revision (its bytes are written again instead).
func partsPresent(dir string, parts []Part) bool {
	for _, p := range parts {
		fi, err := os.Stat(filepath.Join(dir, ShardDir, p.Shard+shardExt))
		if err != nil || fi.Size() < p.Offset+p.Length {
			return false
		}
	}
	return true
}

// removeTemps deletes what interrupted commits left (atomicfile's
// temporary files); only the lock holder calls it, so nothing is still
// writing them.
func removeTemps(dir string) {
	for _, sub := range []string{"", ManifestDir, ShardDir} {
		ents, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, e := range ents {
			if atomicfile.IsTemp(e.Name()) {
				os.Remove(filepath.Join(dir, sub, e.Name()))
			}
		}
	}
}

func unlock(f *os.File) {
	f.Truncate(0)
	f.Close()
}

// pendingBlob is content to be written, with the blobs that name it.
type pendingBlob struct {
	data  []byte
	parts []Part
	users []*Blob
}

// piece is a run of a blob's bytes placed at offset in a shard.
type piece struct {
	blob   *pendingBlob
	data   []byte
	offset int64
}

type shard struct {
	pieces []*piece
	size   int64 // page-padded
}

func pageUp(n int64) int64 { return (n + PageSize - 1) / PageSize * PageSize }

// packShards lays the pending blobs out in shards of at most shardLimit
// bytes, in order, every piece page-aligned; a blob too large for one
// shard is split at shardLimit.
func packShards(pending []*pendingBlob) []*shard {
	var out []*shard
	cur := &shard{}
	for _, p := range pending {
		data := p.data
		if len(data) == 0 {
			continue
		}
		for len(data) > 0 {
			room := shardLimit - cur.size
			if room <= 0 || int64(len(data)) > room && int64(len(data)) <= shardLimit {
				// Start a new shard rather than split a blob that fits one.
				if len(cur.pieces) > 0 {
					out = append(out, cur)
				}
				cur = &shard{}
				room = shardLimit
			}
			n := min(int64(len(data)), room)
			cur.pieces = append(cur.pieces, &piece{blob: p, data: data[:n], offset: cur.size})
			cur.size += pageUp(n)
			data = data[n:]
		}
	}
	if len(cur.pieces) > 0 {
		out = append(out, cur)
	}
	return out
}

var zeroPage [PageSize]byte

// writeTo writes the shard's bytes, padding included.
func (s *shard) writeTo(w io.Writer) error {
	var at int64
	for _, pc := range s.pieces {
		if _, err := w.Write(pc.data); err != nil {
			return err
		}
		at += int64(len(pc.data))
		for pad := pageUp(at) - at; pad > 0; {
			k := min(pad, PageSize)
			if _, err := w.Write(zeroPage[:k]); err != nil {
				return err
			}
			pad -= k
			at += k
		}
	}
	return nil
}

// writeShard names the shard by its content and writes it, unless a shard
// of that name is already there (the same bytes). It returns the name and
// the bytes written.
func writeShard(dir string, s *shard) (string, int64, error) {
	h := sha256.New()
	if err := s.writeTo(h); err != nil {
		return "", 0, err
	}
	name := hexHash([32]byte(h.Sum(nil)))
	path := filepath.Join(dir, ShardDir, name+shardExt)
	if fi, err := os.Stat(path); err == nil && fi.Size() == s.size {
		return name, 0, nil
	}
	if err := atomicfile.Write(path, s.writeTo); err != nil {
		return "", 0, fmt.Errorf("fmodel: writing shard %s: %v", path, err)
	}
	return name, s.size, nil
}
