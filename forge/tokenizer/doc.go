// Package tokenizer turns text into token ids and back for Forge's
// language models: a byte-level BPE tokenizer (BPE, learned by TrainBPE)
// and a character-level one (Char, from TrainChar). Both satisfy
// Tokenizer, which is what data preparation, training and generation use.
//
//	tok, err := tokenizer.TrainBPE(text, 4096, tokenizer.BPEOptions{})
//	ids := tok.Encode("It is a truth universally acknowledged")
//	text := tok.Decode(ids) // the same string, byte for byte
//	err = tok.Save("tok.json")
//	t2, err := tokenizer.Load("tok.json")
//
// Every string round-trips exactly: Decode(Encode(s)) == s for any s,
// including invalid UTF-8, NUL bytes and characters never seen in
// training, because both tokenizers fall back to the 256 byte values.
//
// # Byte-level BPE
//
// Tokens 0..255 are the byte values. Merge i joins two earlier tokens into
// token 256+i, so a tokenizer with VocabSize v has v-256 merges. Training
// and encoding first split the text into chunks; merges never cross a
// chunk boundary. Training counts each distinct chunk once with its
// frequency and repeatedly merges the most frequent adjacent pair (ties:
// smaller left id, then smaller right id), updating counts only in the
// chunks that held the pair. Encoding applies, inside each chunk, the
// lowest-numbered merge that fits until none does, and caches the ids of
// recently seen short chunks.
//
// # The split rule
//
// Each character of the text is classified: a letter (Unicode categories L
// and M, so combining accents stay with their letter), a digit (category
// N), whitespace (unicode.IsSpace) or other (everything else, including
// each byte that is not part of valid UTF-8, which counts as a
// one-byte character). Chunks are then taken from left to right:
//
//  1. An apostrophe followed by s, t, d, m, re, ve or ll, in either case,
//     and not by a further letter, is a chunk: "don't" → "don" "'t".
//  2. A run of letters, a run of one to three digits, or a run of other
//     characters is a chunk. A single space (U+0020) directly before it
//     joins it: " the", " 202" "4", " --".
//  3. A run of whitespace is a chunk, except that if it ends in a space
//     and a non-space character follows, that last space is left to the
//     next chunk by rule 2: "\n\n  Emma" → "\n\n " " Emma".
//  4. No chunk is longer than 256 bytes; a longer run is cut at character
//     boundaries into pieces of at most 256 bytes.
//
// The chunks concatenate back to the text. Character classes come from
// the Unicode tables of the Go release that built the program; characters
// added to Unicode later may split differently under a newer Go, which
// changes their encoding but never breaks the round trip. BPE files record
// the rule's name ("forge-v1") and Load refuses files made under another.
//
// # Character level
//
// Char numbers the characters of its set from 256 (TrainChar takes every
// character of its text, in code point order) and keeps ids 0..255 for raw
// bytes: a character outside the set, or an invalid byte, is encoded as its
// bytes.
//
// # Display
//
// Token(id) shows a token for people: printable characters as they are, a
// space as "␣", newline, carriage return and tab as \n \r \t, a backslash as
// \\, other characters as \u{hex} and bytes that are not valid UTF-8 as
// \xNN. An id outside the vocabulary shows as "<bad id N>".
//
// # File format
//
// Save writes a small JSON document, replacing the file atomically (a
// temporary file in the same directory, flushed to disk, then renamed):
//
//	{
//	  "format": "forge-tokenizer",
//	  "version": 1,
//	  "kind": "bpe",
//	  "vocab_size": 4096,
//	  "split": "forge-v1",
//	  "merges": [
//	    [104, 101],
//	    [32, 116],
//	    ...
//	  ]
//	}
//
// Merge i creates token 256+i, one merge per line. A character tokenizer
// has "kind": "char" and, instead of "split" and "merges", "runes": a JSON
// string whose i-th character is token 256+i.
//
// # Errors
//
// Load and Unmarshal check the whole document and return an error naming
// the file (Load) and the problem, with a hint at the cause: not JSON, an
// unknown field, the wrong format, version, kind or split rule, a
// vocab_size that does not match the merges or runes, a merge that uses a
// token not yet defined, repeats an earlier merge or makes a token longer
// than a chunk, a repeated rune. Save returns the file system's error.
// TrainBPE fails only for a vocabulary size outside 256..MaxVocabSize.
// Encode never fails. Decode writes U+FFFD for an id outside the
// vocabulary; DecodeChecked (on BPE and Char) reports it as an error
// instead. All methods are safe for concurrent use.
package tokenizer
