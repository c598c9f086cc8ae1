package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forgeml/forge/internal/atomicfile"
)

// Tokenizer is what the data pipeline, trainer and generator need.
type Tokenizer interface {
	// Encode returns the ids of text, each in 0..VocabSize()-1. Any
	// string is accepted, including invalid UTF-8.
	Encode(text string) []int
	// Decode returns the text of ids; Decode(Encode(s)) == s for every
	// s. Ids outside the vocabulary come out as U+FFFD. Decoding
	// concatenates — Decode(a ++ b) == Decode(a) + Decode(b) — so a
	// stream of tokens can be written out one token at a time.
	Decode(ids []int) string
	// VocabSize returns the number of distinct ids.
	VocabSize() int
	// Kind returns "bpe" or "char".
	Kind() string
	// Save writes the tokenizer to path atomically.
	Save(path string) error
	// Token returns a printable form of one token, for display.
	Token(id int) string
}

// File format constants.
const (
	fileFormat  = "forge-tokenizer"
	fileVersion = 1
)

// MaxVocabSize is the largest vocabulary TrainBPE builds and Load accepts.
// It leaves room for a character vocabulary holding every Unicode
// character.
const MaxVocabSize = 1 << 21

// fileDoc is the JSON document of a tokenizer file. Fields that belong to
// one kind only are kept raw so that their presence can be checked.
type fileDoc struct {
	Format    *string         `json:"format"`
	Version   *int            `json:"version"`
	Kind      *string         `json:"kind"`
	VocabSize *int            `json:"vocab_size"`
	Split     json.RawMessage `json:"split"`
	Merges    json.RawMessage `json:"merges"`
	Runes     json.RawMessage `json:"runes"`
}

// Load reads a tokenizer file written by Save, of either kind. Errors name
// the file and the problem.
func Load(path string) (Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// Unmarshal is Load for the contents of a file.
func Unmarshal(data []byte) (Tokenizer, error) {
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

const hintNotOurs = "(is this a file written by tokenizer.Save?)"

func parse(data []byte) (Tokenizer, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("not valid JSON %s", hintNotOurs)
	}
	var doc fileDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("malformed tokenizer document: %v %s", cleanJSONError(err), hintNotOurs)
	}
	switch {
	case doc.Format == nil:
		return nil, fmt.Errorf(`field "format" is missing %s`, hintNotOurs)
	case *doc.Format != fileFormat:
		return nil, fmt.Errorf(`field "format" is %q, want %q %s`, *doc.Format, fileFormat, hintNotOurs)
	case doc.Version == nil:
		return nil, errors.New(`field "version" is missing (file corrupt?)`)
	case *doc.Version != fileVersion:
		return nil, fmt.Errorf("format version %d is not supported: this build reads version %d; use a matching build of forge or train the tokenizer again",
			*doc.Version, fileVersion)
	case doc.Kind == nil:
		return nil, errors.New(`field "kind" is missing; want "bpe" or "char" (file corrupt?)`)
	case *doc.Kind != "bpe" && *doc.Kind != "char":
		return nil, fmt.Errorf(`unknown kind %q: this build knows "bpe" and "char"; use a matching build of forge`, *doc.Kind)
	case doc.VocabSize == nil:
		return nil, errors.New(`field "vocab_size" is missing (file corrupt?)`)
	case *doc.VocabSize < 256 || *doc.VocabSize > MaxVocabSize:
		return nil, fmt.Errorf("vocab_size %d is out of range: it must be between 256 (the byte tokens) and %d (file corrupt?)",
			*doc.VocabSize, MaxVocabSize)
	}
	if *doc.Kind == "char" {
		return parseChar(&doc)
	}
	return parseBPE(&doc)
}

// cleanJSONError drops the decoder's "json: " prefix, so that the message
// reads as part of ours.
func cleanJSONError(err error) string {
	s, _ := strings.CutPrefix(err.Error(), "json: ")
	return s
}

func notFor(field, kind string) error {
	return fmt.Errorf("field %q does not belong in a %s tokenizer file (file corrupt, or edited by hand?)", field, kind)
}

func parseBPE(doc *fileDoc) (*BPE, error) {
	if doc.Runes != nil {
		return nil, notFor("runes", "bpe")
	}
	if doc.Split == nil {
		return nil, fmt.Errorf(`field "split" is missing; want %q (file corrupt?)`, splitRule)
	}
	var split string
	if err := json.Unmarshal(doc.Split, &split); err != nil || split != splitRule {
		return nil, fmt.Errorf(`split rule %s is not supported: this build splits text by rule %q; use a matching build of forge or train the tokenizer again`,
			doc.Split, splitRule)
	}
	var raw [][]int
	if doc.Merges != nil {
		if err := json.Unmarshal(doc.Merges, &raw); err != nil {
			return nil, fmt.Errorf(`field "merges" must be a list of [left, right] id pairs: %s (file corrupt?)`, cleanJSONError(err))
		}
	}
	if want := 256 + len(raw); *doc.VocabSize != want {
		return nil, fmt.Errorf("vocab_size is %d but 256 byte tokens and %d merges make %d tokens (file corrupt or truncated?)",
			*doc.VocabSize, len(raw), want)
	}
	merges, err := checkMerges(raw)
	if err != nil {
		return nil, err
	}
	return newBPE(merges), nil
}

// checkMerges validates a merge list: every merge joins two tokens that
// exist before it, no pair is merged twice and no token is longer than a
// chunk can be.
func checkMerges(raw [][]int) ([][2]int32, error) {
	merges := make([][2]int32, len(raw))
	length := make([]int, 256, 256+len(raw))
	for i := range length {
		length[i] = 1
	}
	seen := make(map[uint64]int, len(raw))
	for i, m := range raw {
		id := 256 + i
		if len(m) != 2 {
			return nil, fmt.Errorf("merge %d (token %d) has %d ids; each merge is a pair [left, right] (file corrupt?)", i, id, len(m))
		}
		for _, x := range m {
			if x < 0 || x >= id {
				return nil, fmt.Errorf("merge %d (token %d) refers to token %d, which does not exist yet; a merge may only join earlier tokens (file corrupt?)",
					i, id, x)
			}
		}
		k := pairKey(int32(m[0]), int32(m[1]))
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("merge %d repeats merge %d, [%d, %d] (file corrupt?)", i, j, m[0], m[1])
		}
		seen[k] = i
		n := length[m[0]] + length[m[1]]
		if n > maxChunkBytes {
			return nil, fmt.Errorf("merge %d (token %d) makes a token of %d bytes, longer than the %d bytes a chunk can hold (file corrupt?)",
				i, id, n, maxChunkBytes)
		}
		length = append(length, n)
		merges[i] = [2]int32{int32(m[0]), int32(m[1])}
	}
	return merges, nil
}

func parseChar(doc *fileDoc) (*Char, error) {
	if doc.Merges != nil {
		return nil, notFor("merges", "char")
	}
	if doc.Split != nil {
		return nil, notFor("split", "char")
	}
	if doc.Runes == nil {
		return nil, errors.New(`field "runes" is missing (file corrupt?)`)
	}
	var s string
	if err := json.Unmarshal(doc.Runes, &s); err != nil {
		return nil, fmt.Errorf(`field "runes" must be a string holding the vocabulary's characters: %s (file corrupt?)`, cleanJSONError(err))
	}
	runes := []rune(s)
	if want := 256 + len(runes); *doc.VocabSize != want {
		return nil, fmt.Errorf("vocab_size is %d but 256 byte tokens and %d runes make %d tokens (file corrupt or truncated?)",
			*doc.VocabSize, len(runes), want)
	}
	first := make(map[rune]int, len(runes))
	for i, r := range runes {
		if j, dup := first[r]; dup {
			return nil, fmt.Errorf(`rune %s appears twice in "runes", at %d and %d; each may appear once (file corrupt?)`, describeRune(r), j, i)
		}
		first[r] = i
	}
	return newChar(runes), nil
}

func describeRune(r rune) string {
	return fmt.Sprintf("%s (%U)", strconv.QuoteRune(r), r)
}

// marshalHeader writes the fields every tokenizer file starts with.
func marshalHeader(b *bytes.Buffer, kind string, vocab int) {
	fmt.Fprintf(b, "{\n  \"format\": %q,\n  \"version\": %d,\n  \"kind\": %q,\n  \"vocab_size\": %d,\n",
		fileFormat, fileVersion, kind, vocab)
}

// jsonString encodes s as a JSON string without escaping <, > and &.
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// writeFileAtomic writes data to path so that readers see either the old
// file or the new one, never a partial write.
func writeFileAtomic(path string, data []byte) error {
	if err := atomicfile.WriteBytes(path, data); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	return nil
}

// display renders token bytes for people: printable characters as they
// are, a space as "␣", \n \r \t and a backslash escaped, other characters
// as \u{…} and bytes that are not valid UTF-8 as \xNN.
func display(s string) string {
	var b []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = fmt.Appendf(b, `\x%02x`, s[i])
		case r == ' ':
			b = append(b, "␣"...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\\':
			b = append(b, `\\`...)
		case unicode.IsPrint(r):
			b = append(b, s[i:i+n]...)
		default:
			b = fmt.Appendf(b, `\u{%x}`, r)
		}
		i += n
	}
	return string(b)
}

func badToken(id int) string { return fmt.Sprintf("<bad id %d>", id) }
