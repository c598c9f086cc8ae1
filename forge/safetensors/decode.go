package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header, in bytes, that Unmarshal and
// ReadFile accept and that Marshal produces. It is the limit other
// safetensors readers apply too; a larger length field means a corrupt
// file or one that is not safetensors at all.
const MaxHeaderSize = 100_000_000

// FormatError reports data that is not a valid safetensors file. Unmarshal
// and ReadFile return one (as a *FormatError) for every problem with the
// content, so callers can tell a damaged file from an I/O failure with
// errors.As.
type FormatError struct {
	Path string // the file, when the data came from ReadFile
	Msg  string // what is wrong and, where it helps, what to do
}

func (e *FormatError) Error() string {
	if e.Path != "" {
		return "safetensors: " + e.Path + ": " + e.Msg
	}
	return "safetensors: " + e.Msg
}

func formatErr(format string, args ...any) *FormatError {
	return &FormatError{Msg: fmt.Sprintf(format, args...)}
}

// File is a decoded safetensors file.
type File struct {
	// Tensors in the order of their data in the file.
	Tensors []Tensor
	// Metadata is the header's "__metadata__" map; never nil after
	// Unmarshal or ReadFile.
	Metadata map[string]string
}

// Get returns the tensor with the given name. It scans f.Tensors, so it
// stays correct if the slice is edited.
func (f *File) Get(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// headerBounds checks the header length n against the total size of the
// file; "" means it fits.
func headerBounds(n, total uint64) string {
	if n > total-8 {
		return fmt.Sprintf("header length %d exceeds the %d bytes that follow the length prefix (file size %d): the file is truncated or is not a safetensors file",
			n, total-8, total)
	}
	if n > MaxHeaderSize {
		return fmt.Sprintf("header length %d exceeds the %d-byte limit: the file is corrupt or is not a safetensors file", n, MaxHeaderSize)
	}
	return ""
}

// Unmarshal decodes and validates a safetensors file held in b.
//
// The returned tensors' Data slices point into b (each with its capacity
// cut at its end, so appending to one cannot overwrite another); copy them,
// or b, before changing b.
//
// Unmarshal never panics and allocates at most a small multiple of len(b).
// It returns a *FormatError if b is shorter than 8 bytes; if the header
// length is larger than the rest of b or than MaxHeaderSize; if the header
// is not UTF-8, not a JSON object, or repeats a key (at any level); if a
// tensor entry is not an object of exactly "dtype", "shape" and
// "data_offsets", has an unknown dtype, a shape with a negative, fractional
// or oversized dimension or more than MaxRank of them, data_offsets other
// than two integers begin <= end within the data buffer, or a byte length
// other than product(shape) * dtype size; if a tensor name is empty; if
// tensors overlap or leave bytes of the buffer uncovered (the buffer must
// be exactly the tensors' data, back to back); or if "__metadata__" is not
// an object of strings (null is read as empty).
func Unmarshal(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, formatErr("file is %d bytes, shorter than the 8-byte header-length prefix: the file is truncated or is not a safetensors file", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if msg := headerBounds(n, uint64(len(b))); msg != "" {
		return nil, &FormatError{Msg: msg}
	}
	hdr := b[8 : 8+n]
	buf := b[8+n:]
	if len(hdr) == 0 {
		return nil, formatErr(`header length is 0, but even a file without tensors has the header "{}": the file is corrupt or is not a safetensors file`)
	}
	if !utf8.Valid(hdr) {
		return nil, formatErr("header is not valid UTF-8: the file is corrupt or is not a safetensors file")
	}
	if hdr[0] != '{' {
		return nil, formatErr("header starts with %q, not '{': the file is corrupt or is not a safetensors file", hdr[:min(len(hdr), 16)])
	}
	if !json.Valid(hdr) {
		var raw json.RawMessage
		err := json.Unmarshal(hdr, &raw)
		return nil, formatErr("header is not valid JSON (%v): the file is corrupt or is not a safetensors file", err)
	}
	p := &headerParser{dec: json.NewDecoder(bytes.NewReader(hdr)), bufLen: len(buf)}
	p.dec.UseNumber()
	entries, meta, err := p.parse()
	if err != nil {
		return nil, err
	}

	// The tensors must tile the buffer: sorted by offsets, each begins
	// where the previous ends, and the last ends at the end of the file.
	slices.SortFunc(entries, func(a, c entry) int {
		return cmp.Or(cmp.Compare(a.begin, c.begin), cmp.Compare(a.end, c.end), strings.Compare(a.name, c.name))
	})
	pos := 0
	for i, e := range entries {
		if e.begin < pos {
			prev := entries[i-1]
			return nil, formatErr("tensors %q (bytes [%d, %d)) and %q (bytes [%d, %d)) overlap in the data buffer: the header is corrupt",
				prev.name, prev.begin, prev.end, e.name, e.begin, e.end)
		}
		if e.begin > pos {
			return nil, formatErr("data buffer bytes [%d, %d) belong to no tensor (a gap before tensor %q); the format requires the tensors to cover the buffer without gaps: the header is corrupt",
				pos, e.begin, e.name)
		}
		pos = e.end
	}
	if pos != len(buf) {
		return nil, formatErr("the data buffer is %d bytes but the tensors cover only the first %d: the file has trailing bytes or its header lacks tensors",
			len(buf), pos)
	}

	f := &File{Tensors: make([]Tensor, len(entries)), Metadata: meta}
	if f.Metadata == nil {
		f.Metadata = map[string]string{}
	}
	for i, e := range entries {
		f.Tensors[i] = Tensor{Name: e.name, DType: e.dtype, Shape: e.shape, Data: buf[e.begin:e.end:e.end]}
	}
	return f, nil
}

// ReadFile reads and decodes the safetensors file at path. Errors name the
// file; problems with its content are *FormatError values (see Unmarshal).
// The length prefix is checked before the rest of the file is read, so a
// large file of another kind fails without being loaded.
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var b []byte
	if size := fi.Size(); fi.Mode().IsRegular() && size >= 8 {
		if uint64(size) > math.MaxInt {
			return nil, fmt.Errorf("safetensors: %s: file of %d bytes is too large to load on this platform", path, size)
		}
		var prefix [8]byte
		if _, err := io.ReadFull(fh, prefix[:]); err != nil {
			return nil, fmt.Errorf("safetensors: reading %s: %w", path, err)
		}
		if msg := headerBounds(binary.LittleEndian.Uint64(prefix[:]), uint64(size)); msg != "" {
			return nil, &FormatError{Path: path, Msg: msg}
		}
		b = make([]byte, size)
		copy(b, prefix[:])
		if _, err := io.ReadFull(fh, b[8:]); err != nil {
			return nil, fmt.Errorf("safetensors: reading %s (did it shrink while being read?): %w", path, err)
		}
	} else if b, err = io.ReadAll(fh); err != nil {
		return nil, fmt.Errorf("safetensors: reading %s: %w", path, err)
	}
	f, err := Unmarshal(b)
	if err != nil {
		if fe, ok := err.(*FormatError); ok {
			fe.Path = path
		}
		return nil, err
	}
	return f, nil
}

// entry is one tensor as described by the header.
type entry struct {
	name       string
	dtype      DType
	shape      []int
	begin, end int
}

// headerParser walks the header token by token (encoding/json's Unmarshal
// would silently keep the last of two equal keys). The header has already
// been checked to be valid JSON, so token errors are not expected.
type headerParser struct {
	dec    *json.Decoder
	bufLen int
}

func (p *headerParser) token() (json.Token, error) {
	t, err := p.dec.Token()
	if err != nil {
		return nil, formatErr("header is not valid JSON (%v): the file is corrupt or is not a safetensors file", err)
	}
	return t, nil
}

// describe names the kind of a JSON value by its first token.
func describe(t json.Token) string {
	switch v := t.(type) {
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "an array"
		}
		return "a stray " + v.String()
	case string:
		return "a string"
	case json.Number:
		return "the number " + v.String()
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", t)
}

func (p *headerParser) parse() ([]entry, map[string]string, error) {
	if _, err := p.token(); err != nil { // the '{' checked by the caller
		return nil, nil, err
	}
	seen := map[string]bool{}
	var entries []entry
	var meta map[string]string
	for p.dec.More() {
		t, err := p.token()
		if err != nil {
			return nil, nil, err
		}
		key, _ := t.(string)
		if seen[key] {
			return nil, nil, formatErr("header has the key %q twice, so its meaning is ambiguous: the file is corrupt or was written by a faulty writer", key)
		}
		seen[key] = true
		if key == metadataKey {
			if meta, err = p.metadata(); err != nil {
				return nil, nil, err
			}
			continue
		}
		e, err := p.entry(key)
		if err != nil {
			return nil, nil, err
		}
		entries = append(entries, e)
	}
	return entries, meta, nil
}

func (p *headerParser) metadata() (map[string]string, error) {
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, nil
	}
	if t != json.Delim('{') {
		return nil, formatErr("%q is %s; it must be an object mapping strings to strings", metadataKey, describe(t))
	}
	meta := map[string]string{}
	for p.dec.More() {
		t, err := p.token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		if _, dup := meta[key]; dup {
			return nil, formatErr("%q has the key %q twice, so its meaning is ambiguous: the file is corrupt or was written by a faulty writer", metadataKey, key)
		}
		if t, err = p.token(); err != nil {
			return nil, err
		}
		v, ok := t.(string)
		if !ok {
			return nil, formatErr("%q entry %q is %s; metadata values must be strings (the writer must encode other values, e.g. as JSON text)", metadataKey, key, describe(t))
		}
		meta[key] = v
	}
	_, err = p.token() // '}'
	return meta, err
}

func (p *headerParser) entry(name string) (entry, error) {
	e := entry{name: name}
	fail := func(format string, args ...any) (entry, error) {
		return entry{}, formatErr("tensor %q: %s: the header is corrupt", name, fmt.Sprintf(format, args...))
	}
	if name == "" {
		return entry{}, formatErr(`a tensor has the empty name ""; this package requires non-empty names (rename the tensor where the file was written)`)
	}
	t, err := p.token()
	if err != nil {
		return entry{}, err
	}
	if t != json.Delim('{') {
		return fail(`entry is %s, want an object with "dtype", "shape" and "data_offsets"`, describe(t))
	}
	var haveDType, haveShape bool
	var offsets []int
	for p.dec.More() {
		if t, err = p.token(); err != nil {
			return entry{}, err
		}
		field, _ := t.(string)
		switch field {
		case "dtype":
			if haveDType {
				return fail(`field "dtype" appears twice`)
			}
			haveDType = true
			if t, err = p.token(); err != nil {
				return entry{}, err
			}
			s, ok := t.(string)
			if !ok {
				return fail("dtype is %s, want a string such as \"F32\"", describe(t))
			}
			e.dtype = DType(s)
			if e.dtype.Size() == 0 {
				return entry{}, formatErr("tensor %q: unknown dtype %q (supported: %s); convert the tensor to a supported dtype where the file was written",
					name, s, supportedDTypes())
			}
		case "shape":
			if haveShape {
				return fail(`field "shape" appears twice`)
			}
			haveShape = true
			if e.shape, err = p.ints(name, "shape", MaxRank); err != nil {
				return entry{}, err
			}
		case "data_offsets":
			if offsets != nil {
				return fail(`field "data_offsets" appears twice`)
			}
			if offsets, err = p.ints(name, "data_offsets", 2); err != nil {
				return entry{}, err
			}
		default:
			return fail(`unknown field %q (an entry has exactly "dtype", "shape" and "data_offsets")`, field)
		}
	}
	if _, err := p.token(); err != nil { // '}'
		return entry{}, err
	}
	switch {
	case !haveDType:
		return fail(`missing "dtype"`)
	case !haveShape:
		return fail(`missing "shape"`)
	case offsets == nil:
		return fail(`missing "data_offsets"`)
	case len(offsets) != 2:
		return fail("data_offsets has %d values, want two: [begin, end]", len(offsets))
	}
	e.begin, e.end = offsets[0], offsets[1]
	if e.begin > e.end {
		return fail("data_offsets [%d, %d] end before they begin", e.begin, e.end)
	}
	if e.end > p.bufLen {
		return entry{}, formatErr("tensor %q: data_offsets [%d, %d] reach past the end of the %d-byte data buffer: the file is truncated or its header is corrupt",
			name, e.begin, e.end, p.bufLen)
	}
	n, err := byteLen(e.dtype, e.shape)
	if err != nil {
		return fail("%v", err)
	}
	if n != e.end-e.begin {
		return fail("shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d", e.shape, e.dtype, n, e.begin, e.end, e.end-e.begin)
	}
	return e, nil
}

// ints reads an array of at most max non-negative integers that fit in an
// int; field names it in errors. The result is never nil.
func (p *headerParser) ints(name, field string, max int) ([]int, error) {
	fail := func(format string, args ...any) ([]int, error) {
		return nil, formatErr("tensor %q: %s: the header is corrupt", name, fmt.Sprintf(format, args...))
	}
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	if t != json.Delim('[') {
		return fail("%s is %s, want an array of integers", field, describe(t))
	}
	out := []int{}
	for p.dec.More() {
		if len(out) == max {
			if field == "shape" {
				return fail("shape has more than %d dimensions", max)
			}
			return fail("%s has more than %d values, want [begin, end]", field, max)
		}
		if t, err = p.token(); err != nil {
			return nil, err
		}
		num, ok := t.(json.Number)
		if !ok {
			return fail("%s contains %s, want only integers", field, describe(t))
		}
		s := num.String()
		if strings.HasPrefix(s, "-") {
			return fail("%s contains the negative value %s", field, s)
		}
		if strings.ContainsAny(s, ".eE") {
			return fail("%s contains %s, which is not written as an integer", field, s)
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v > math.MaxInt {
			return fail("%s contains %s, which overflows an int", field, s)
		}
		out = append(out, int(v))
	}
	if _, err := p.token(); err != nil { // ']'
		return nil, err
	}
	return out, nil
}
