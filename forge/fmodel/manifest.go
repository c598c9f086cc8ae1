package fmodel

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/forgeml/forge/forge/safetensors"
)

const (
	// Format and Version identify a manifest.
	Format  = "forge-model"
	Version = 1
	// PageSize is the alignment of every part in a shard and of a
	// shard's length.
	PageSize = 16 << 10
	// MaxShardBytes caps a shard's length (below the 100 MB a file may
	// have on common git hosts).
	MaxShardBytes = 95_000_000
	// maxManifestBytes bounds what Open and Load read as a manifest.
	maxManifestBytes = 64 << 20
	maxEntries       = 1 << 20
)

// Manifest is one revision of a model.
type Manifest struct {
	Format  string            `json:"format"`
	Version int               `json:"version"`
	Parent  string            `json:"parent,omitempty"` // the previous revision's hash, "" for the first
	Message string            `json:"message"`
	Time    time.Time         `json:"time"`
	Config  json.RawMessage   `json:"config,omitempty"` // the model's (training) config, as JSON
	Meta    map[string]string `json:"meta,omitempty"`   // free-form: step, source run, …
	Tensors []Entry           `json:"tensors"`
	Files   []Blob            `json:"files,omitempty"` // auxiliary files: the tokenizer
}

// Blob is a named run of bytes stored in shards.
type Blob struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // of the bytes, hex
	Parts  []Part `json:"parts"`  // in order; their lengths sum to Size
}

// Entry is a tensor: a Blob with an element type and a shape.
type Entry struct {
	Blob
	DType safetensors.DType `json:"dtype"`
	Shape []int             `json:"shape"`
}

// Part is a piece of a blob: Length bytes at Offset in a shard.
type Part struct {
	Shard  string `json:"shard"` // the shard's hash
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// Bytes returns the total bytes of the tensors.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, e := range m.Tensors {
		n += e.Size
	}
	return n
}

// ParseManifest decodes and validates a manifest. Errors say what is
// wrong; callers add the file.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("manifest of %d bytes is larger than the limit of %d", len(b), maxManifestBytes)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a manifest: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a manifest: trailing data after the JSON object")
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// validate checks everything a reader relies on: the format, unique
// names, dtypes and shapes whose byte size is the blob's, and parts that
// are page-aligned, positive and add up.
func (m *Manifest) validate() error {
	switch {
	case m.Format != Format:
		return fmt.Errorf("format %q: want %q", m.Format, Format)
	case m.Version != Version:
		return fmt.Errorf("version %d: this Forge reads version %d (a newer Forge wrote it? upgrade)", m.Version, Version)
	case m.Parent != "" && !isHash(m.Parent):
		return fmt.Errorf("parent %q is not a SHA-256 hash", m.Parent)
	case len(m.Tensors)+len(m.Files) > maxEntries:
		return fmt.Errorf("%d entries: more than the limit of %d", len(m.Tensors)+len(m.Files), maxEntries)
	}
	if len(m.Config) > 0 && !json.Valid(m.Config) {
		return fmt.Errorf("config is not valid JSON")
	}
	seen := map[string]bool{}
	for i := range m.Tensors {
		e := &m.Tensors[i]
		if err := e.validate(); err != nil {
			return fmt.Errorf("tensor %q: %v", e.Name, err)
		}
		if seen[e.Name] {
			return fmt.Errorf("tensor %q is listed twice", e.Name)
		}
		seen[e.Name] = true
	}
	files := map[string]bool{}
	for i := range m.Files {
		f := &m.Files[i]
		if err := f.validate(); err != nil {
			return fmt.Errorf("file %q: %v", f.Name, err)
		}
		if files[f.Name] {
			return fmt.Errorf("file %q is listed twice", f.Name)
		}
		files[f.Name] = true
	}
	return nil
}

func (e *Entry) validate() error {
	if err := e.Blob.validate(); err != nil {
		return err
	}
	n, err := byteSize(e.DType, e.Shape)
	if err != nil {
		return err
	}
	if n != e.Size {
		return fmt.Errorf("dtype %s and shape %v make %d bytes, but the size is %d", e.DType, e.Shape, n, e.Size)
	}
	return nil
}

func (b *Blob) validate() error {
	switch {
	case b.Name == "":
		return fmt.Errorf("no name")
	case b.Size < 0:
		return fmt.Errorf("negative size %d", b.Size)
	case !isHash(b.SHA256):
		return fmt.Errorf("sha256 %q is not a SHA-256 hash", b.SHA256)
	case b.Size > 0 && len(b.Parts) == 0:
		return fmt.Errorf("%d bytes but no parts", b.Size)
	}
	var sum int64
	for _, p := range b.Parts {
		switch {
		case !isHash(p.Shard):
			return fmt.Errorf("shard %q is not a SHA-256 hash", p.Shard)
		case p.Offset < 0 || p.Offset%PageSize != 0:
			return fmt.Errorf("part at offset %d: want a multiple of %d", p.Offset, PageSize)
		case p.Length <= 0 || p.Length > MaxShardBytes || p.Offset > MaxShardBytes-p.Length:
			return fmt.Errorf("part of %d bytes at offset %d does not fit a shard of at most %d bytes", p.Length, p.Offset, MaxShardBytes)
		}
		sum += p.Length
		if sum > b.Size {
			break
		}
	}
	if sum != b.Size {
		return fmt.Errorf("parts hold %d bytes, but the size is %d", sum, b.Size)
	}
	return nil
}

// byteSize is the byte length of a tensor, or an error for an unknown
// dtype, a negative dimension, too many dimensions or an overflow.
func byteSize(d safetensors.DType, shape []int) (int64, error) {
	size := d.Size()
	if size == 0 {
		return 0, fmt.Errorf("unknown dtype %q", string(d))
	}
	if len(shape) > safetensors.MaxRank {
		return 0, fmt.Errorf("shape has %d dimensions, more than %d", len(shape), safetensors.MaxRank)
	}
	n := uint64(size)
	for _, s := range shape {
		if s < 0 {
			return 0, fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n = lo
	}
	return int64(n), nil
}

// isHash reports whether s is 64 lowercase hex digits.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func hexHash(sum [32]byte) string { return hex.EncodeToString(sum[:]) }
