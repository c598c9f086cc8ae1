// Package data gets text to a model: it holds Forge's built-in corpus,
// turns text into token files, and serves batches from them.
//
//	text := data.Austen()
//	res, err := data.Prepare([]string{text}, tok, "out/austen", data.PrepareOptions{Context: 256})
//	...
//	train, err := data.OpenLoader(res.TrainPath, 16, 256, 1337)
//	...
//	defer train.Close()
//	for step := 0; step < steps; step++ {
//		x, y := train.Next() // 16×256 inputs and their targets
//		...
//	}
//
// # Built-in corpus
//
// Austen returns Jane Austen's six novels (about 4 MB of public-domain
// text, embedded compressed in the binary; see corpus/NOTICE.md for its
// provenance and checksum). Builtin looks a corpus up by name;
// DefaultCorpus names the one to use when the user gives none.
//
// # Token files
//
// Token files use the format of llm.c's data files, so files written here
// feed llm.c and the other way round:
//
//	bytes 0..1023   header: 256 little-endian int32
//	                  [0] magic   20240520
//	                  [1] version 1 (tokens are uint16)
//	                  [2] token count n (0 ≤ n < 2³¹)
//	                  [3..255] zero
//	bytes 1024..    n little-endian uint16 tokens, nothing after them
//
// Token ids therefore range over 0..65535: a vocabulary larger than 65536
// (llm.c's version 2, uint32 tokens) is refused. WriteTokens writes
// atomically: a temporary file in the same directory, synced and renamed
// over the target, so a crash leaves the old file or the new one, never a
// partial one. Prepare encodes text with any Encoder and writes the
// train.bin and val.bin of a directory, the validation split taken from the
// end of the corpus.
//
// # Batches and determinism
//
// A Loader memory-maps a token file (on Linux and macOS; it reads it whole
// elsewhere). Next returns batch windows of context+1 consecutive tokens as
// inputs x and targets y = x shifted by one, at positions drawn uniformly
// from [0, n-context-1] by xoshiro256** seeded through SplitMix64. The
// generator uses only integer arithmetic, so a seed yields the same batches
// on every platform; the first outputs are pinned by a test. State and
// SetState save and restore the generator with the number of batches drawn,
// so a resumed run sees exactly the batches an uninterrupted one would
// have. Eval walks the file in consecutive, non-overlapping windows from
// the start, for a validation loss that is the same every time.
//
// # Errors
//
// Everything that touches files returns errors: reading, writing, mapping,
// Prepare's checks (vocabulary over 65536, ids outside the vocabulary, a
// corpus too small for a training and a validation window, options out of
// range) and OpenLoader's (a file shorter than one window). A damaged
// token file yields a *FormatError naming the file, what is wrong with it
// (too short for the header, wrong magic number with a guess at what the
// file is instead, wrong version, a nonzero reserved header word, more or
// fewer bytes than the header's count implies, saying how many) and how to
// fix it; errors.Is matches it against ErrNotTokenFile, ErrVersion,
// ErrHeader or ErrSize. SetState returns an error for a state saved for a
// different file (token count) or batch shape. Misusing a Loader — Next
// after Close, NextInto with slices of the wrong length — is a programming
// error and panics, as in the rest of Forge.
package data
