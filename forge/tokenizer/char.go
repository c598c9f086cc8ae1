package tokenizer

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"
)

// Char is a character-level tokenizer. Ids 0..255 are raw bytes, used for
// anything outside the character set: characters not seen in training and
// bytes that are not valid UTF-8. Id 256+i is the i-th character of the
// set (TrainChar sorts them by code point). Its methods are safe for
// concurrent use.
type Char struct {
	runes []rune
	ids   map[rune]int32
	ascii [utf8.RuneSelf]int32 // id of each ASCII character
}

// TrainChar returns a character tokenizer whose set is every valid
// character in text, in code point order. Invalid UTF-8 bytes are not
// characters; they are always encoded as byte ids.
func TrainChar(text string) *Char {
	seen := make(map[rune]bool)
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if r != utf8.RuneError || n > 1 {
			seen[r] = true
		}
		i += n
	}
	runes := make([]rune, 0, len(seen))
	for r := range seen {
		runes = append(runes, r)
	}
	slices.Sort(runes)
	return newChar(runes)
}

// newChar builds a tokenizer from distinct valid runes.
func newChar(runes []rune) *Char {
	t := &Char{runes: runes, ids: make(map[rune]int32, len(runes))}
	for c := range t.ascii {
		t.ascii[c] = int32(c)
	}
	for i, r := range runes {
		t.ids[r] = int32(256 + i)
		if r < utf8.RuneSelf {
			t.ascii[r] = int32(256 + i)
		}
	}
	return t
}

// Kind returns "char".
func (t *Char) Kind() string { return "char" }

// VocabSize returns 256 plus the number of characters in the set.
func (t *Char) VocabSize() int { return 256 + len(t.runes) }

// Runes returns a copy of the character set, in id order from 256.
func (t *Char) Runes() []rune { return slices.Clone(t.runes) }

// Encode returns one id per character of text, or one per byte for
// characters outside the set and for invalid bytes.
func (t *Char) Encode(text string) []int {
	out := make([]int, 0, len(text))
	for i := 0; i < len(text); {
		if c := text[i]; c < utf8.RuneSelf {
			out = append(out, int(t.ascii[c]))
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		if id, ok := t.ids[r]; ok && (r != utf8.RuneError || n > 1) {
			out = append(out, int(id))
		} else {
			for j := i; j < i+n; j++ {
				out = append(out, int(text[j]))
			}
		}
		i += n
	}
	return out
}

// Decode writes each byte id as its byte and each character id as the
// character's UTF-8 bytes. An id outside 0..VocabSize()-1 is written as
// U+FFFD; use DecodeChecked to have such ids reported instead.
func (t *Char) Decode(ids []int) string {
	var b strings.Builder
	b.Grow(len(ids))
	for _, id := range ids {
		switch {
		case uint(id) < 256:
			b.WriteByte(byte(id))
		case uint(id) < uint(256+len(t.runes)):
			b.WriteRune(t.runes[id-256])
		default:
			b.WriteString(replacement)
		}
	}
	return b.String()
}

// DecodeChecked is Decode but returns an error naming the first id outside
// 0..VocabSize()-1, if any.
func (t *Char) DecodeChecked(ids []int) (string, error) {
	if err := checkIDs(ids, t.VocabSize()); err != nil {
		return "", err
	}
	return t.Decode(ids), nil
}

// Token returns a printable form of token id (see the package comment).
func (t *Char) Token(id int) string {
	switch {
	case uint(id) < 256:
		return display(string([]byte{byte(id)}))
	case uint(id) < uint(256+len(t.runes)):
		return display(string(t.runes[id-256]))
	}
	return badToken(id)
}

// Marshal returns the tokenizer file's contents, as Save writes them.
func (t *Char) Marshal() []byte {
	var b bytes.Buffer
	marshalHeader(&b, "char", t.VocabSize())
	b.WriteString("  \"runes\": ")
	b.Write(jsonString(string(t.runes)))
	b.WriteString("\n}\n")
	return b.Bytes()
}

// Save writes the tokenizer to path atomically: to a temporary file in the
// same directory, flushed to disk, then renamed over path.
func (t *Char) Save(path string) error { return writeFileAtomic(path, t.Marshal()) }
