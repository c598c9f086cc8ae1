package data

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// Loader serves training batches from a token file: random windows for
// training (Next) and consecutive windows for evaluation (Eval). On Linux
// and macOS the file is memory-mapped, so opening it costs no reading and
// the pages are shared with the OS cache; elsewhere it is read whole.
//
// A Loader is not safe for concurrent use. While it is open, the file must
// not be truncated or rewritten in place (WriteTokens and Prepare replace
// files by renaming, which is safe).
type Loader struct {
	path    string
	data    []byte // the whole file; nil after Close
	release func() error
	n       int // tokens in the file
	batch   int
	context int
	seed    uint64
	rng     RNGState
	batches uint64
}

// LoaderState is what a Loader needs to resume its sequence of batches
// exactly; it is plain data that encoding/json round-trips. Tokens, Batch
// and Context describe the loader it came from, so SetState can refuse a
// state saved for another file or shape.
type LoaderState struct {
	Seed    uint64   `json:"seed,string"` // the seed the loader was opened with
	RNG     RNGState `json:"rng"`         // the generator's state after Batches batches
	Batches uint64   `json:"batches"`     // batches drawn by Next so far
	Tokens  int      `json:"tokens"`      // tokens in the file
	Batch   int      `json:"batch"`
	Context int      `json:"context"`
}

// OpenLoader opens the token file at path for batches of batch windows of
// context tokens each, drawn at random from a generator seeded with seed.
// It validates the file as ParseTokens does, and refuses one with fewer
// than context+1 tokens. Close the Loader when done.
func OpenLoader(path string, batch, context int, seed uint64) (*Loader, error) {
	if batch < 1 || context < 1 {
		return nil, fmt.Errorf("data: opening %s: batch (%d) and context (%d) must both be at least 1", path, batch, context)
	}
	b, release, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	h, err := checkHeader(path, b)
	if err == nil && h.count <= context {
		err = fmt.Errorf("data: %s: %d tokens are too few for context %d: a window needs at least %d (context+1); use a smaller context, or more text (or a larger ValFraction for val.bin) in `forge prepare`",
			path, h.count, context, int64(context)+1)
	}
	if err != nil {
		release()
		return nil, err
	}
	return &Loader{
		path:    path,
		data:    b,
		release: release,
		n:       h.count,
		batch:   batch,
		context: context,
		seed:    seed,
		rng:     newRNG(seed),
	}, nil
}

// Path returns the file the Loader reads.
func (l *Loader) Path() string { return l.path }

// Tokens returns the number of tokens in the file.
func (l *Loader) Tokens() int { return l.n }

// Batch returns the number of windows per batch.
func (l *Loader) Batch() int { return l.batch }

// Context returns the number of tokens per window of input.
func (l *Loader) Context() int { return l.context }

// Close releases the file (unmapping it). It is safe to call twice; the
// Loader serves no batches afterwards.
func (l *Loader) Close() error {
	if l.release == nil {
		return nil
	}
	err := l.release()
	l.data, l.release = nil, nil
	if err != nil {
		return fmt.Errorf("data: closing %s: %w", l.path, err)
	}
	return nil
}

func (l *Loader) mustBeOpen(op string) {
	if l.release == nil {
		panic(fmt.Sprintf("data: Loader.%s on %s after Close", op, l.path))
	}
}

// token returns token i of the file.
func (l *Loader) token(i int) int32 {
	return int32(binary.LittleEndian.Uint16(l.data[HeaderBytes+2*i:]))
}

// window writes the context tokens from position pos into x and the
// context tokens from pos+1 into y.
func (l *Loader) window(pos int, x, y []int32) {
	prev := l.token(pos)
	for i := range x {
		next := l.token(pos + i + 1)
		x[i], y[i] = prev, next
		prev = next
	}
}

// Next returns the next training batch: x holds batch windows of context
// tokens, one after another (batch×context values, row-major), and y the
// same windows shifted one token on, the targets. Each window starts at a
// position drawn uniformly from [0, Tokens()-context-1], independently of
// the others, so windows may overlap. The positions depend only on the
// seed and the number of batches drawn before.
func (l *Loader) Next() (x, y []int32) {
	x = make([]int32, l.batch*l.context)
	y = make([]int32, l.batch*l.context)
	l.NextInto(x, y)
	return x, y
}

// NextInto is Next writing into x and y, which must each hold
// batch×context values.
func (l *Loader) NextInto(x, y []int32) {
	l.mustBeOpen("Next")
	size := l.batch * l.context
	if len(x) != size || len(y) != size {
		panic(fmt.Sprintf("data: Loader.NextInto: x and y need %d×%d = %d values each, got %d and %d",
			l.batch, l.context, size, len(x), len(y)))
	}
	starts := uint64(l.n - l.context) // positions 0..n-context-1
	for b := 0; b < l.batch; b++ {
		pos := int(l.rng.below(starts))
		l.window(pos, x[b*l.context:(b+1)*l.context], y[b*l.context:(b+1)*l.context])
	}
	l.batches++
}

// State returns what SetState needs to continue the sequence of batches
// from this point.
func (l *Loader) State() LoaderState {
	return LoaderState{
		Seed:    l.seed,
		RNG:     l.rng,
		Batches: l.batches,
		Tokens:  l.n,
		Batch:   l.batch,
		Context: l.context,
	}
}

// SetState makes the Loader continue from a State taken earlier, possibly by
// another process: the batches that follow are those that followed when
// the state was taken. It refuses a state saved for a file with another
// token count, for another batch size or context, or with an invalid
// generator state, and leaves the Loader unchanged then.
func (l *Loader) SetState(s LoaderState) error {
	switch {
	case s.Tokens != l.n:
		return fmt.Errorf("data: %s: the loader state was saved for a file of %d tokens, this one has %d; resume with the file the run started with (or start a new run)",
			l.path, s.Tokens, l.n)
	case s.Batch != l.batch || s.Context != l.context:
		return fmt.Errorf("data: %s: the loader state was saved for batch %d, context %d; this loader has batch %d, context %d; open it with the saved shape to resume",
			l.path, s.Batch, s.Context, l.batch, l.context)
	case s.RNG.zero():
		return fmt.Errorf("data: %s: the loader state has an all-zero generator state, which no loader produces; the saved state is damaged", l.path)
	}
	l.seed, l.rng, l.batches = s.Seed, s.RNG, s.Batches
	return nil
}

// Batches returns the number of batches Next has drawn (including those
// counted in a state restored by SetState).
func (l *Loader) Batches() uint64 { return l.batches }

// EvalWindows returns the number of windows Eval walks: (Tokens()-1)/context.
func (l *Loader) EvalWindows() int { return (l.n - 1) / l.context }

// Eval walks the file from its start in consecutive windows that do not
// overlap: window i has inputs tokens[i·context : (i+1)·context] and targets
// one token on. It yields them in batches of up to Batch() windows, laid out
// as Next's, as (x, y); the last batch may hold fewer windows. maxBatches > 0
// stops after that many batches. Eval is deterministic and leaves the random
// sequence of Next untouched. Each yielded slice is new, so callers may keep
// it.
func (l *Loader) Eval(maxBatches int) iter.Seq2[[]int32, []int32] {
	return func(yield func(x, y []int32) bool) {
		l.mustBeOpen("Eval")
		windows := l.EvalWindows()
		for start, nb := 0, 0; start < windows; start, nb = start+l.batch, nb+1 {
			if maxBatches > 0 && nb == maxBatches {
				return
			}
			k := min(l.batch, windows-start)
			x := make([]int32, k*l.context)
			y := make([]int32, k*l.context)
			for w := range k {
				l.window((start+w)*l.context, x[w*l.context:(w+1)*l.context], y[w*l.context:(w+1)*l.context])
			}
			if !yield(x, y) {
				return
			}
		}
	}
}

// EvalBatches collects Eval(maxBatches) into a slice of {x, y} pairs.
func (l *Loader) EvalBatches(maxBatches int) [][2][]int32 {
	var out [][2][]int32
	for x, y := range l.Eval(maxBatches) {
		out = append(out, [2][]int32{x, y})
	}
	return out
}
