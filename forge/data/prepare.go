package data

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// Encoder turns text into token ids. The tokenizer package satisfies it.
type Encoder interface {
	// Encode returns the ids of text, each in 0..VocabSize()-1.
	Encode(text string) []int
	// VocabSize returns the number of distinct ids.
	VocabSize() int
}

// Names of the files Prepare writes in its directory.
const (
	TrainFile = "train.bin"
	ValFile   = "val.bin"
)

// Defaults for PrepareOptions' zero fields.
const (
	DefaultValFraction = 0.1
	DefaultContext     = 256
	DefaultChunkBytes  = 256 << 10
	DefaultWorkers     = 2
)

// PrepareOptions tunes Prepare. The zero value asks for the defaults.
type PrepareOptions struct {
	// ValFraction is the share of the tokens held out for validation,
	// taken from the end of the corpus; 0 means DefaultValFraction. It
	// must lie in [0, 1).
	ValFraction float64
	// Context is the training context length. Each split receives at
	// least Context+1 tokens, one window, so a Loader can open it with
	// this context; 0 means DefaultContext.
	Context int
	// ChunkBytes is the size of the pieces the text is encoded in; 0
	// means DefaultChunkBytes. Pieces end at paragraph breaks where
	// possible (see Prepare).
	ChunkBytes int
	// Parallel encodes pieces on several goroutines at once. Set it only
	// if the Encoder is safe for concurrent use. The output is identical
	// either way.
	Parallel bool
	// Workers is the number of goroutines when Parallel is set; 0 means
	// DefaultWorkers.
	Workers int
	// Progress, if not nil, is called from Prepare's goroutine after each
	// piece is encoded, with the bytes of text encoded so far and in all.
	Progress func(doneBytes, totalBytes int)
}

// PrepareResult describes what Prepare wrote.
type PrepareResult struct {
	TrainPath   string // dir/train.bin
	ValPath     string // dir/val.bin
	TrainTokens int
	ValTokens   int
	TextBytes   int // bytes of text encoded
	Chunks      int // pieces the text was encoded in
}

// Tokens returns the total number of tokens written.
func (r PrepareResult) Tokens() int { return r.TrainTokens + r.ValTokens }

// Prepare encodes texts with enc and writes the token files dir/train.bin
// and dir/val.bin (creating dir if needed). Each file is replaced
// atomically (see WriteTokens), the pair is not: should writing val.bin
// fail, a new train.bin may sit beside the old val.bin, and the error says
// so.
//
// Each document in texts is encoded on its own and the token streams are
// concatenated in order, with nothing inserted between them: no separator
// text and no end-of-text token. To separate documents, end each with the
// separating text wanted (a blank line, say) before calling Prepare.
//
// A document longer than ChunkBytes is cut into pieces of about that size,
// each ending just after a blank line (a paragraph break) when one lies in
// the second half of the piece, else after a newline, else after a space,
// else at a character boundary. The pieces are encoded separately; a
// tokenizer whose tokens could span such a cut may therefore produce a
// slightly different (never wrong) sequence than encoding the document in
// one call. The cuts depend only on the text and ChunkBytes, not on
// Parallel, so the files are identical with and without it.
//
// The last ValFraction of the tokens (at least Context+1 of them) become
// val.bin, the rest train.bin, which also needs at least Context+1 tokens.
// Prepare returns an error, before writing anything, if the vocabulary
// exceeds MaxVocab (65536, the uint16 limit), if the encoder returns an id
// outside 0..VocabSize()-1, if the corpus is too small for two windows or
// if an option is out of range.
func Prepare(texts []string, enc Encoder, dir string, opts PrepareOptions) (PrepareResult, error) {
	res := PrepareResult{
		TrainPath: filepath.Join(dir, TrainFile),
		ValPath:   filepath.Join(dir, ValFile),
	}
	if err := opts.fill(); err != nil {
		return res, err
	}
	if enc == nil {
		return res, errors.New("data: prepare: no encoder; pass a tokenizer")
	}
	vocab := enc.VocabSize()
	if vocab > MaxVocab {
		return res, fmt.Errorf("data: prepare: the tokenizer has %d ids but token files store uint16 ids (at most %d); use a vocabulary of at most %d",
			vocab, MaxVocab, MaxVocab)
	}
	if vocab <= 0 {
		return res, fmt.Errorf("data: prepare: the tokenizer reports a vocabulary of %d ids; it must be at least 1", vocab)
	}

	var pieces []piece
	for d, t := range texts {
		offset := 0
		for _, p := range splitText(t, opts.ChunkBytes) {
			pieces = append(pieces, piece{text: p, doc: d, offset: offset})
			offset += len(p)
		}
		res.TextBytes += len(t)
	}
	res.Chunks = len(pieces)
	encoded, err := encodePieces(pieces, enc, vocab, opts, res.TextBytes)
	if err != nil {
		return res, err
	}
	n := 0
	for _, t := range encoded {
		n += len(t)
	}
	if err := checkCount(dir, n); err != nil {
		return res, err
	}
	tokens := make([]uint16, 0, n)
	for i, t := range encoded {
		tokens = append(tokens, t...)
		encoded[i] = nil
	}

	window := opts.Context + 1
	val := int(math.Round(float64(n) * opts.ValFraction))
	val = max(val, window)
	if n-val < window {
		return res, fmt.Errorf("data: prepare: the corpus encodes to %d tokens, too few for a training and a validation window of %d tokens each (context %d + 1): need at least %d; use more text or a smaller context (PrepareOptions.Context)",
			n, window, opts.Context, 2*window)
	}
	train := n - val

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, fmt.Errorf("data: prepare: creating %s: %w", dir, err)
	}
	if err := WriteTokens(res.TrainPath, tokens[:train]); err != nil {
		return res, err
	}
	if err := WriteTokens(res.ValPath, tokens[train:]); err != nil {
		return res, fmt.Errorf("%w (%s was already rewritten; run Prepare again to write a matching pair)", err, res.TrainPath)
	}
	res.TrainTokens, res.ValTokens = train, val
	return res, nil
}

// fill replaces zero fields by defaults and checks the rest.
func (o *PrepareOptions) fill() error {
	if o.ValFraction == 0 {
		o.ValFraction = DefaultValFraction
	}
	if !(o.ValFraction > 0 && o.ValFraction < 1) {
		return fmt.Errorf("data: prepare: ValFraction %v is outside [0, 1); use e.g. 0.1 for 10%% validation", o.ValFraction)
	}
	if o.Context == 0 {
		o.Context = DefaultContext
	}
	if o.Context < 0 {
		return fmt.Errorf("data: prepare: Context %d is negative; use the model's context length", o.Context)
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.ChunkBytes < 0 {
		return fmt.Errorf("data: prepare: ChunkBytes %d is negative; leave it 0 for %d", o.ChunkBytes, DefaultChunkBytes)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Workers < 0 {
		return fmt.Errorf("data: prepare: Workers %d is negative; leave it 0 for %d", o.Workers, DefaultWorkers)
	}
	return nil
}

// piece is a part of a document, encoded in one Encode call.
type piece struct {
	text   string
	doc    int // index of the document in Prepare's texts
	offset int // byte offset of text in the document
}

// encode encodes p and converts the ids to tokens, refusing any id outside
// 0..vocab-1.
func (p piece) encode(enc Encoder, vocab int) ([]uint16, error) {
	ids := enc.Encode(p.text)
	tokens := make([]uint16, len(ids))
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("data: prepare: the tokenizer returned id %d, outside 0..%d (token %d of the piece of document %d starting at byte %d); %s",
				id, vocab-1, i, p.doc, p.offset, idAdvice(id, vocab))
		}
		tokens[i] = uint16(id)
	}
	return tokens, nil
}

// encodePieces encodes each piece, in parallel if opts asks, reporting
// progress from the calling goroutine. The result is in piece order; the
// error is that of the first failing piece. A panic in the Encoder reaches
// the caller's goroutine in both modes.
func encodePieces(pieces []piece, enc Encoder, vocab int, opts PrepareOptions, total int) ([][]uint16, error) {
	out := make([][]uint16, len(pieces))
	errs := make([]error, len(pieces))
	done := 0
	report := func(i int) {
		done += len(pieces[i].text)
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	workers := min(opts.Workers, len(pieces))
	if !opts.Parallel || workers <= 1 {
		for i, p := range pieces {
			if out[i], errs[i] = p.encode(enc, vocab); errs[i] != nil {
				return nil, errs[i]
			}
			report(i)
		}
		return out, nil
	}

	next := make(chan int)
	finished := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked any
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				func() {
					defer func() {
						if r := recover(); r != nil {
							mu.Lock()
							if panicked == nil {
								panicked = r
							}
							mu.Unlock()
						}
					}()
					out[i], errs[i] = pieces[i].encode(enc, vocab)
				}()
				finished <- i
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range pieces {
			mu.Lock()
			stop := panicked != nil
			mu.Unlock()
			if stop {
				return
			}
			next <- i
		}
	}()
	go func() {
		wg.Wait()
		close(finished)
	}()
	for i := range finished {
		report(i)
	}
	if panicked != nil {
		panic(panicked)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SplitText cuts s into pieces of at most about size bytes, as Prepare
// cuts long documents: after a paragraph break, newline or space in the
// second half of each piece where there is one. Concatenating the pieces
// gives s back.
func SplitText(s string, size int) []string { return splitText(s, size) }

// splitText cuts s into pieces of at most about size bytes (see Prepare for
// where the cuts fall). Concatenating the pieces gives s back.
func splitText(s string, size int) []string {
	var pieces []string
	for len(s) > size {
		cut := cutPoint(s, size)
		pieces = append(pieces, s[:cut])
		s = s[cut:]
	}
	if len(s) > 0 {
		pieces = append(pieces, s)
	}
	return pieces
}

// cutPoint returns where to end the next piece of s, which is longer than
// size: in (0, size], as late as possible after a paragraph break, newline
// or space found in the second half, else at the last rune boundary (or
// after the first rune, should that alone be longer than size).
func cutPoint(s string, size int) int {
	lo := size / 2
	window := s[lo:size]
	for _, sep := range []string{"\n\n", "\n", " "} {
		if i := strings.LastIndex(window, sep); i >= 0 {
			return lo + i + len(sep)
		}
	}
	for cut := size; cut > 0; cut-- {
		if utf8.RuneStart(s[cut]) {
			return cut
		}
	}
	// size is smaller than the first character: end after it instead.
	cut := size + 1
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return cut
}
