package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/forgeml/forge/internal/atomicfile"
)

// Token file layout (llm.c's data files, version 1).
const (
	// TokenMagic is the first int32 of every token file.
	TokenMagic = 20240520
	// TokenVersion is the only version this package reads and writes:
	// tokens stored as uint16.
	TokenVersion = 1
	// HeaderBytes is the size of the header: 256 little-endian int32s.
	HeaderBytes = 256 * 4
	// MaxTokens is the most tokens a file can hold: the count is an int32.
	MaxTokens = math.MaxInt32
	// MaxVocab is the largest vocabulary whose ids fit the uint16 tokens.
	MaxVocab = 1 << 16
)

// Magic numbers of llm.c's other files, recognised only to explain errors.
const (
	llmcModelMagic     = 20240326
	llmcTokenizerMagic = 20240328
)

// fixPrepare is the advice attached to errors about a damaged token file.
const fixPrepare = "re-run `forge prepare` to rebuild it"

// Sentinel errors wrapped by *FormatError, for errors.Is.
var (
	// ErrNotTokenFile: the data does not start with TokenMagic.
	ErrNotTokenFile = errors.New("not a token file")
	// ErrVersion: the header has a version other than TokenVersion.
	ErrVersion = errors.New("unsupported token file version")
	// ErrHeader: the header is incomplete or has invalid fields.
	ErrHeader = errors.New("bad token file header")
	// ErrSize: the data is longer or shorter than its header says.
	ErrSize = errors.New("token file size does not match its header")
)

// FormatError reports token data that ParseTokens, ReadTokens or OpenLoader
// cannot accept. Its message names the file, says what is wrong and how to
// fix it; errors.Is matches it against ErrNotTokenFile, ErrVersion,
// ErrHeader or ErrSize.
type FormatError struct {
	Path   string // file name; empty for ParseTokens
	Kind   error  // one of the Err* sentinels above
	Reason string // what is wrong, in words
	Fix    string // what to do about it
}

func (e *FormatError) Error() string {
	name := e.Path
	if name == "" {
		name = "token data"
	}
	return "data: " + name + ": " + e.Reason + "; " + e.Fix
}

// Unwrap returns e.Kind.
func (e *FormatError) Unwrap() error { return e.Kind }

// header is the validated content of a token file's header.
type header struct {
	count int // number of tokens after the header
}

// checkHeader validates b, a whole token file's bytes, and returns the
// token count. path names the file in errors (empty for ParseTokens).
func checkHeader(path string, b []byte) (header, error) {
	bad := func(kind error, fix, format string, args ...any) (header, error) {
		return header{}, &FormatError{Path: path, Kind: kind, Reason: fmt.Sprintf(format, args...), Fix: fix}
	}
	if len(b) == 0 {
		return bad(ErrHeader, fixPrepare, "empty file (a token file has a %d-byte header)", HeaderBytes)
	}
	if len(b) >= 4 {
		if magic := binary.LittleEndian.Uint32(b); magic != TokenMagic {
			what, fix := describe(b)
			return bad(ErrNotTokenFile, fix, "not a token file (magic 0x%08x; want %d = 0x%08x): %s",
				magic, TokenMagic, TokenMagic, what)
		}
	}
	if len(b) < HeaderBytes {
		return bad(ErrHeader, fixPrepare, "truncated header: the file has %d bytes, the header alone needs %d",
			len(b), HeaderBytes)
	}
	version := int32(binary.LittleEndian.Uint32(b[4:]))
	switch {
	case version == 2:
		return bad(ErrVersion, "write it with a vocabulary of at most 65536 ids and "+fixPrepare,
			"version 2 (uint32 tokens, llm.c's format for vocabularies over 65536) is not supported; want version %d (uint16 tokens)",
			TokenVersion)
	case version != TokenVersion:
		return bad(ErrVersion, fixPrepare, "unsupported version %d; want %d", version, TokenVersion)
	}
	count := int32(binary.LittleEndian.Uint32(b[8:]))
	if count < 0 {
		return bad(ErrHeader, fixPrepare, "the header gives a negative token count (%d)", count)
	}
	for i := 3; i < HeaderBytes/4; i++ {
		if w := int32(binary.LittleEndian.Uint32(b[4*i:])); w != 0 {
			return bad(ErrHeader, fixPrepare, "header word %d is %d; want 0 (words 3 to 255 are reserved)", i, w)
		}
	}
	want := int64(HeaderBytes) + 2*int64(count)
	have := int64(len(b))
	switch {
	case have < want:
		return bad(ErrSize, fixPrepare,
			"truncated: the header promises %d tokens, %d bytes in all, but the file has %d bytes (%d missing)",
			count, want, have, want-have)
	case have > want:
		return bad(ErrSize, fixPrepare,
			"%d unexpected bytes after the %d tokens the header promises: want %d bytes in all, the file has %d",
			have-want, count, want, have)
	}
	return header{count: int(count)}, nil
}

// describe guesses what b holds, for the error about a wrong magic number,
// and returns the description and the advice to give.
func describe(b []byte) (what, fix string) {
	magic := binary.LittleEndian.Uint32(b)
	head := b[:min(len(b), 64)]
	switch {
	case magic == bits32swap(TokenMagic):
		return "the header is big-endian, token files are little-endian", fixPrepare
	case magic == llmcModelMagic:
		return "it looks like an llm.c model checkpoint", "pass the token file (train.bin or val.bin) instead"
	case magic == llmcTokenizerMagic:
		return "it looks like an llm.c tokenizer file", "pass the token file (train.bin or val.bin) instead"
	case b[0] == 0x1f && b[1] == 0x8b:
		return "it looks gzip-compressed", "decompress it, or " + fixPrepare
	case bytes.HasPrefix(b, []byte("\x93NUMPY")):
		return "it looks like a NumPy .npy array", "write it in llm.c's format (or " + fixPrepare + ")"
	case bytes.HasPrefix(b, []byte("PK\x03\x04")):
		return "it looks like a zip archive", "unpack it, or " + fixPrepare
	case isText(head):
		return "it looks like text (" + clip(head, 24) + ")",
			"token files are made from text by `forge prepare`; run it on this file"
	case allZero(head):
		return "it starts with zero bytes, as an unfinished write leaves a file", fixPrepare
	}
	return fmt.Sprintf("it starts % x", b[:min(len(b), 8)]), fixPrepare
}

func bits32swap(v uint32) uint32 {
	return v>>24 | (v>>8)&0xff00 | (v<<8)&0xff0000 | v<<24
}

// isText reports whether b is valid UTF-8 made of printable characters and
// ordinary whitespace (allowing a rune cut at the end).
func isText(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\n' && r != '\r' && r != '\t' || r == 0x7f {
			return false
		}
		b = b[size:]
	}
	return true
}

// clip quotes at most n bytes of b, cut at a rune boundary and marked
// with an ellipsis if cut.
func clip(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return strconv.Quote(string(b[:n])) + "…"
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ParseTokens decodes a whole token file held in b. It returns a
// *FormatError if b is shorter than the header, has the wrong magic number
// or version, sets a reserved header word, or is longer or shorter than the
// token count in its header says.
func ParseTokens(b []byte) ([]uint16, error) {
	return parseTokens("", b)
}

func parseTokens(path string, b []byte) ([]uint16, error) {
	h, err := checkHeader(path, b)
	if err != nil {
		return nil, err
	}
	tokens := make([]uint16, h.count)
	body := b[HeaderBytes:]
	for i := range tokens {
		tokens[i] = binary.LittleEndian.Uint16(body[2*i:])
	}
	return tokens, nil
}

// ReadTokens reads and validates the token file at path, as ParseTokens.
func ReadTokens(path string) ([]uint16, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, openError(path, err)
	}
	return parseTokens(path, b)
}

// openError words an error from opening or reading a token file.
func openError(path string, err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err // the message names the path already
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("data: token file %s does not exist; create it with `forge prepare`: %w", path, err)
	}
	return fmt.Errorf("data: reading token file %s: %w", path, err)
}

// MarshalTokens returns tokens as the bytes of a token file: the header
// followed by the tokens. It fails only for more than MaxTokens tokens.
func MarshalTokens(tokens []uint16) ([]byte, error) {
	if err := checkCount("", len(tokens)); err != nil {
		return nil, err
	}
	b := make([]byte, HeaderBytes, HeaderBytes+2*len(tokens))
	putHeader(b, len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint16(b, t)
	}
	return b, nil
}

func checkCount(path string, n int) error {
	if int64(n) > MaxTokens {
		name := path
		if name == "" {
			name = "token data"
		}
		return fmt.Errorf("data: %s: %d tokens is more than a token file holds (%d); split the corpus into several files",
			name, n, int64(MaxTokens))
	}
	return nil
}

// Header returns the header of a token file of count tokens, for writers
// that stream tokens and fill the count in last.
func Header(count int) []byte {
	b := make([]byte, HeaderBytes)
	putHeader(b, count)
	return b
}

// putHeader fills the HeaderBytes of b with the header for count tokens.
func putHeader(b []byte, count int) {
	clear(b[:HeaderBytes])
	binary.LittleEndian.PutUint32(b[0:], TokenMagic)
	binary.LittleEndian.PutUint32(b[4:], TokenVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
}

// WriteTokens writes tokens to path as a token file. The write is atomic:
// the data goes to a temporary file in the same directory, which is synced
// to disk and then renamed over path, so readers see either the old file
// or the complete new one, never a partial write. An existing file keeps
// its permissions; a new one gets 0644.
func WriteTokens(path string, tokens []uint16) error {
	if err := checkCount(path, len(tokens)); err != nil {
		return err
	}
	return writeAtomic(path, func(w io.Writer) error {
		buf := make([]byte, HeaderBytes, 64<<10)
		putHeader(buf, len(tokens))
		for _, t := range tokens {
			if len(buf)+2 > cap(buf) {
				if _, err := w.Write(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
			buf = binary.LittleEndian.AppendUint16(buf, t)
		}
		_, err := w.Write(buf)
		return err
	})
}

// WriteTokensInt is WriteTokens for ids held as ints, as tokenizers return
// them. It refuses, before writing anything, an id outside 0..65535.
func WriteTokensInt(path string, ids []int) error {
	tokens, err := toUint16(path, ids, MaxVocab)
	if err != nil {
		return err
	}
	return WriteTokens(path, tokens)
}

// toUint16 converts ids to tokens, refusing any id outside 0..vocab-1.
func toUint16(path string, ids []int, vocab int) ([]uint16, error) {
	tokens := make([]uint16, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("data: %s: token id %d at position %d is outside 0..%d; %s",
				path, id, i, vocab-1, idAdvice(id, vocab))
		}
		tokens[i] = uint16(id)
	}
	return tokens, nil
}

func idAdvice(id, vocab int) string {
	switch {
	case id < 0:
		return "the tokenizer returned a negative id, which is a bug in the tokenizer"
	case vocab == MaxVocab:
		return "token files store ids as uint16, so use a tokenizer with at most 65536 ids"
	}
	return fmt.Sprintf("the tokenizer returned an id beyond its own VocabSize (%d), which is a bug in the tokenizer", vocab)
}

// writeAtomic writes path through write, via a synced temporary file in
// the same directory that is renamed over path once complete.
func writeAtomic(path string, write func(io.Writer) error) error {
	if err := atomicfile.Write(path, write); err != nil {
		return fmt.Errorf("data: writing %s: %w; the old file, if any, is unchanged", path, err)
	}
	return nil
}
