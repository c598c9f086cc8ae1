package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// splitRule names the pre-tokenization rule implemented by nextChunk. BPE
// files record it so that a file trained under one rule is never silently
// used with another. Changing the rule in any way that alters a chunk
// boundary requires a new name.
const splitRule = "forge-v1"

// maxChunkBytes bounds the length of one chunk, and therefore of one BPE
// token. Longer runs are cut at character boundaries.
const maxChunkBytes = 256

// maxDigits is the longest run of digits kept in one chunk.
const maxDigits = 3

// charClass is the category of one character for splitting.
type charClass uint8

const (
	classSpace  charClass = iota // unicode.IsSpace
	classLetter                  // Unicode L (letters) and M (combining marks)
	classDigit                   // Unicode N (numbers)
	classOther                   // everything else, including invalid bytes
)

// asciiClass caches the class of the 128 ASCII characters.
var asciiClass = func() (t [utf8.RuneSelf]charClass) {
	for c := range t {
		t[c] = runeClass(rune(c))
	}
	return t
}()

func runeClass(r rune) charClass {
	switch {
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return classLetter
	case unicode.IsNumber(r):
		return classDigit
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// charAt returns the class and width in bytes of the character s starts
// with; s must not be empty. A byte that does not begin a valid UTF-8
// sequence is a one-byte character of class other.
func charAt(s string) (charClass, int) {
	if c := s[0]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return classOther, 1
	}
	return runeClass(r), n
}

// nextChunk returns the length in bytes of the first chunk of s, which
// must not be empty. The rule is documented in doc.go; in short, chunks
// are contractions, runs of letters, of at most three digits or of other
// characters (each taking one directly preceding space), and runs of
// whitespace, none longer than maxChunkBytes.
func nextChunk(s string) int {
	cls, n := charAt(s)
	if cls == classSpace {
		return spaceChunk(s, n)
	}
	if s[0] == '\'' {
		if m := contraction(s); m > 0 {
			return m
		}
	}
	return n + run(s[n:], cls, maxChunkBytes-n, 1)
}

// spaceChunk measures a chunk starting with whitespace; n is the width of
// its first character.
func spaceChunk(s string, n int) int {
	if s[0] == ' ' && n < len(s) {
		// A single space before a non-space character joins that
		// character's chunk.
		if cls, w := charAt(s[n:]); cls != classSpace {
			return n + w + run(s[n+w:], cls, maxChunkBytes-n-w, 2)
		}
	}
	end, last := n, 0 // last: offset of the run's final character
	for end < len(s) {
		cls, w := charAt(s[end:])
		if cls != classSpace {
			// Leave a final space to the chunk that follows, as above.
			if s[last] == ' ' {
				return last
			}
			return end
		}
		if end+w > maxChunkBytes {
			return end
		}
		last = end
		end += w
	}
	return end
}

// run returns the length of the longest prefix of s made of characters of
// class cls, at most budget bytes long. had is the number of characters
// already in the chunk, counting a leading space; it matters only for
// digits, whose runs stop at maxDigits.
func run(s string, cls charClass, budget, had int) int {
	limit := len(s)
	if budget < limit {
		limit = budget
	}
	if cls == classDigit {
		// A leading space does not count as a digit.
		digits := had
		if had == 2 {
			digits = 1
		}
		end := 0
		for end < limit && digits < maxDigits {
			c, w := charAt(s[end:])
			if c != classDigit || end+w > limit {
				break
			}
			end += w
			digits++
		}
		return end
	}
	end := 0
	for end < limit {
		c, w := charAt(s[end:])
		if c != cls || end+w > limit {
			break
		}
		end += w
	}
	return end
}

// contraction returns the length of an English contraction suffix ('s,
// 't, 'd, 'm, 're, 've, 'll, in any case) at the start of s when no letter
// follows it, else 0. s starts with an apostrophe.
func contraction(s string) int {
	n := 0
	switch {
	case len(s) >= 3 && (pairFold(s[1], s[2], 'r', 'e') || pairFold(s[1], s[2], 'v', 'e') || pairFold(s[1], s[2], 'l', 'l')):
		n = 3
	case len(s) >= 2 && oneOfFold(s[1], "stdm"):
		n = 2
	default:
		return 0
	}
	if n < len(s) {
		if cls, _ := charAt(s[n:]); cls == classLetter {
			return 0
		}
	}
	return n
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func pairFold(c1, c2, want1, want2 byte) bool {
	return lowerASCII(c1) == want1 && lowerASCII(c2) == want2
}

func oneOfFold(c byte, set string) bool {
	c = lowerASCII(c)
	for i := 0; i < len(set); i++ {
		if set[i] == c {
			return true
		}
	}
	return false
}
