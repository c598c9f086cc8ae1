package safetensors

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/forgeml/forge/internal/atomicfile"
)

// layout is a validated set of tensors in buffer order with the header that
// describes them.
type layout struct {
	header  []byte   // JSON, padded with spaces to a multiple of 8 bytes
	tensors []Tensor // in buffer order
	size    int      // total encoded size: 8 + len(header) + data
}

// metadataKey is the reserved header key holding the string-to-string map.
const metadataKey = "__metadata__"

// plan validates tensors and metadata and lays them out. Its errors carry no
// "safetensors:" prefix; the exported callers add it.
func plan(tensors []Tensor, metadata map[string]string) (*layout, error) {
	seen := make(map[string]bool, len(tensors))
	order := make([]Tensor, len(tensors))
	for i, t := range tensors {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("tensor %d (of %d) has an empty name; give every tensor a unique non-empty name", i, len(tensors))
		case t.Name == metadataKey:
			return nil, fmt.Errorf("tensor %d is named %q, which the format reserves for the metadata map; rename it", i, metadataKey)
		case !utf8.ValidString(t.Name):
			return nil, fmt.Errorf("tensor %d has name %q, which is not valid UTF-8; the header is JSON, so names must be UTF-8", i, t.Name)
		case seen[t.Name]:
			return nil, fmt.Errorf("two tensors are named %q; names must be unique", t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		order[i] = t
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("metadata entry %q: %q is not valid UTF-8; the header is JSON, so metadata must be UTF-8", k, v)
		}
	}

	// Largest elements first, so that every tensor starts at a multiple of
	// its element size (the header is padded to 8 bytes); by name within a
	// size. The result does not depend on the order of the input.
	slices.SortFunc(order, func(a, b Tensor) int {
		if sa, sb := a.DType.Size(), b.DType.Size(); sa != sb {
			return sb - sa
		}
		return strings.Compare(a.Name, b.Name)
	})

	h := []byte{'{'}
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h = appendJSONString(h, metadataKey)
		h = append(h, ':', '{')
		for i, k := range keys {
			if i > 0 {
				h = append(h, ',')
			}
			h = appendJSONString(h, k)
			h = append(h, ':')
			h = appendJSONString(h, metadata[k])
		}
		h = append(h, '}')
	}
	offset := 0
	for i, t := range order {
		if i > 0 || len(metadata) > 0 {
			h = append(h, ',')
		}
		if len(t.Data) > math.MaxInt-offset {
			return nil, errors.New("the tensors' total size overflows an int; split them across several files")
		}
		end := offset + len(t.Data)
		h = appendJSONString(h, t.Name)
		h = append(h, `:{"dtype":`...)
		h = appendJSONString(h, string(t.DType))
		h = append(h, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				h = append(h, ',')
			}
			h = strconv.AppendInt(h, int64(d), 10)
		}
		h = append(h, `],"data_offsets":[`...)
		h = strconv.AppendInt(h, int64(offset), 10)
		h = append(h, ',')
		h = strconv.AppendInt(h, int64(end), 10)
		h = append(h, ']', '}')
		offset = end
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	if len(h) > MaxHeaderSize {
		return nil, fmt.Errorf("the header would be %d bytes, above the %d-byte limit readers enforce; use fewer tensors or less metadata per file", len(h), MaxHeaderSize)
	}
	if offset > math.MaxInt-8-len(h) {
		return nil, errors.New("the tensors' total size overflows an int; split them across several files")
	}
	return &layout{header: h, tensors: order, size: 8 + len(h) + offset}, nil
}

// appendJSONString appends s, which must be valid UTF-8, as a JSON string.
// Only '"', '\\' and control characters are escaped, so the output is
// stable and readable.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func (l *layout) writeTo(w io.Writer) error {
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(len(l.header)))
	if _, err := w.Write(prefix[:]); err != nil {
		return err
	}
	if _, err := w.Write(l.header); err != nil {
		return err
	}
	for _, t := range l.tensors {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// Marshal encodes tensors and metadata as a safetensors file.
//
// The output is deterministic: it depends on the set of tensors and the
// metadata map, not on the order of the slice. Tensors are laid out largest
// element size first and by name within a size, which starts every tensor
// at a multiple of its element size; the header lists them in that order,
// after the metadata (sorted by key, omitted when empty), as compact JSON
// padded with spaces to a multiple of 8 bytes.
//
// Marshal returns an error, and encodes nothing, if a name is empty, not
// valid UTF-8, duplicated or "__metadata__"; if a dtype is unknown; if a
// shape has a negative dimension or more than MaxRank; if a tensor's Data
// length is not product(Shape) * DType.Size(); if metadata is not valid
// UTF-8; or if the header would exceed MaxHeaderSize.
func Marshal(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	l, err := plan(tensors, metadata)
	if err != nil {
		return nil, errors.New("safetensors: " + err.Error())
	}
	w := &sliceWriter{b: make([]byte, 0, l.size)}
	_ = l.writeTo(w) // a sliceWriter never fails
	return w.b, nil
}

type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// Write encodes tensors and metadata to w exactly as Marshal does, without
// building the whole file in memory. Invalid input is reported before
// anything is written.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	l, err := plan(tensors, metadata)
	if err != nil {
		return errors.New("safetensors: " + err.Error())
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if err := l.writeTo(bw); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// WriteFile encodes tensors and metadata as Marshal does and replaces the
// file at path with the result atomically: readers of path see the old
// file or the complete new one, never a mix, even if the process or the
// machine stops part-way.
//
// It validates everything first (on invalid input no file is created or
// changed), then writes a temporary file in path's directory, flushes it to
// stable storage, renames it over path and flushes the directory. On any
// failure the temporary file is removed and path is left as it was. The new
// file keeps the permission bits of the regular file it replaces; a new
// path gets 0644 less the umask. If path is a symbolic link, the link
// itself is replaced, not its target. Flushing the directory is best
// effort (package internal/atomicfile does the writing).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	l, err := plan(tensors, metadata)
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %s", path, err)
	}
	if err := atomicfile.Write(path, l.writeTo); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	return nil
}
