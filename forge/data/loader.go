package data

import (
	"encoding/binary"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
	path    string  // the file, or the directory of shards
	shards  []shard // nil after Close
	n       int     // tokens in all shards
	starts  uint64  // window start positions in all shards
	batch   int
	context int
	seed    uint64
	rng     RNGState
	batches uint64
	closed  bool
}

// shard is one mapped token file of a Loader.
type shard struct {
	path    string
	data    []byte
	release func() error
	n       int // tokens
}

// LoaderState is what a Loader needs to resume its sequence of batches
// exactly; it is plain data that encoding/json round-trips. Tokens,
// Shards, Batch and Context describe the loader it came from, so SetState
// can refuse a state saved for other files or another shape. (The shard
// and position of every window follow from the generator's state.)
type LoaderState struct {
	Seed    uint64   `json:"seed,string"`      // the seed the loader was opened with
	RNG     RNGState `json:"rng"`              // the generator's state after Batches batches
	Batches uint64   `json:"batches"`          // batches drawn by Next so far
	Tokens  int      `json:"tokens"`           // tokens in the file (all shards)
	Shards  int      `json:"shards,omitempty"` // token files of a directory of shards (0 or 1: one file)
	Batch   int      `json:"batch"`
	Context int      `json:"context"`
}

// OpenLoader opens the token file at path for batches of batch windows of
// context tokens each, drawn at random from a generator seeded with seed.
// It validates the file as ParseTokens does, and refuses one with fewer
// than context+1 tokens. Close the Loader when done.
//
// path may also be a directory of shards, token files named *.bin (as
// `forge prepare` writes train/ and val/ for a large corpus): the Loader
// then serves windows from all of them as if they were one file, except
// that no window spans two shards. Each shard needs context+1 tokens.
func OpenLoader(path string, batch, context int, seed uint64) (*Loader, error) {
	if batch < 1 || context < 1 {
		return nil, fmt.Errorf("data: opening %s: batch (%d) and context (%d) must both be at least 1", path, batch, context)
	}
	files := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		if files, err = ShardFiles(path); err != nil {
			return nil, err
		}
	}
	l := &Loader{path: path, batch: batch, context: context, seed: seed, rng: newRNG(seed)}
	for _, f := range files {
		b, release, err := mapFile(f)
		if err != nil {
			l.Close()
			return nil, err
		}
		h, err := checkHeader(f, b)
		if err == nil && h.count <= context {
			err = fmt.Errorf("data: %s: %d tokens are too few for context %d: a window needs at least %d (context+1); use a smaller context, or more text (or a larger ValFraction for val.bin) in `forge prepare`",
				f, h.count, context, int64(context)+1)
		}
		if err != nil {
			release()
			l.Close()
			return nil, err
		}
		l.shards = append(l.shards, shard{path: f, data: b, release: release, n: h.count})
		l.n += h.count
		l.starts += uint64(h.count - context)
	}
	return l, nil
}

// ShardFiles lists the token files (*.bin) of a directory of shards, in
// name order; a directory with none is an error.
func ShardFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: %v", err)
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".bin") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("data: %s holds no token files (*.bin); give a token file or a directory of shards `forge prepare` wrote", dir)
	}
	sort.Strings(out)
	return out, nil
}

// Path returns the file the Loader reads.
func (l *Loader) Path() string { return l.path }

// Tokens returns the number of tokens in the file.
func (l *Loader) Tokens() int { return l.n }

// Batch returns the number of windows per batch.
func (l *Loader) Batch() int { return l.batch }

// Context returns the number of tokens per window of input.
func (l *Loader) Context() int { return l.context }

// Shards returns the number of token files the Loader reads.
func (l *Loader) Shards() int { return len(l.shards) }

// Close releases the files (unmapping them). It is safe to call twice; the
// Loader serves no batches afterwards.
func (l *Loader) Close() error {
	var first error
	for _, s := range l.shards {
		if err := s.release(); err != nil && first == nil {
			first = fmt.Errorf("data: closing %s: %w", s.path, err)
		}
	}
	l.shards, l.closed = nil, true
	return first
}

func (l *Loader) mustBeOpen(op string) {
	if l.closed {
		panic(fmt.Sprintf("data: Loader.%s on %s after Close", op, l.path))
	}
}

// token returns token i of shard s.
func (s *shard) token(i int) int32 {
	return int32(binary.LittleEndian.Uint16(s.data[HeaderBytes+2*i:]))
}

// window writes the context tokens from position pos of shard s into x
// and the context tokens from pos+1 into y.
func (s *shard) window(pos int, x, y []int32) {
	prev := s.token(pos)
	for i := range x {
		next := s.token(pos + i + 1)
		x[i], y[i] = prev, next
		prev = next
	}
}

// at maps a window start over all shards (0..starts-1) to its shard and
// the position in it.
func (l *Loader) at(p uint64) (*shard, int) {
	for i := range l.shards {
		s := &l.shards[i]
		k := uint64(s.n - l.context)
		if p < k {
			return s, int(p)
		}
		p -= k
	}
	panic("data: window start out of range")
}

// Next returns the next training batch: x holds batch windows of context
// tokens, one after another (batch×context values, row-major), and y the
// same windows shifted one token on, the targets. Each window starts at a
// position drawn uniformly from [0, Tokens()-context-1], independently of
// the others, so windows may overlap. The positions depend only on the
// seed and the number of batches drawn before. Over shards, every window
// start of every shard is equally likely.
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
	for b := 0; b < l.batch; b++ {
		s, pos := l.at(l.rng.below(l.starts))
		s.window(pos, x[b*l.context:(b+1)*l.context], y[b*l.context:(b+1)*l.context])
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
		Shards:  l.shardCount(),
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
	case s.Tokens != l.n || max(s.Shards, 1) != max(l.shardCount(), 1):
		return fmt.Errorf("data: %s: the loader state was saved for %s of %d tokens, this one has %d in %s; resume with the files the run started with (or start a new run)",
			l.path, shardsOf(s.Shards), s.Tokens, l.n, shardsOf(l.shardCount()))
	case s.Batch != l.batch || s.Context != l.context:
		return fmt.Errorf("data: %s: the loader state was saved for batch %d, context %d; this loader has batch %d, context %d; open it with the saved shape to resume",
			l.path, s.Batch, s.Context, l.batch, l.context)
	case s.RNG.zero():
		return fmt.Errorf("data: %s: the loader state has an all-zero generator state, which no loader produces; the saved state is damaged", l.path)
	}
	l.seed, l.rng, l.batches = s.Seed, s.RNG, s.Batches
	return nil
}

// shardCount is the Shards of a State: 0 for a single file.
func (l *Loader) shardCount() int {
	if len(l.shards) == 1 && l.shards[0].path == l.path {
		return 0
	}
	return len(l.shards)
}

func shardsOf(n int) string {
	if n <= 1 {
		return "one file"
	}
	return fmt.Sprintf("%d shards", n)
}

// Batches returns the number of batches Next has drawn (including those
// counted in a state restored by SetState).
func (l *Loader) Batches() uint64 { return l.batches }

// EvalWindows returns the number of windows Eval walks: (Tokens()-1)/context
// for one file, that per shard summed over shards.
func (l *Loader) EvalWindows() int {
	n := 0
	for _, s := range l.shards {
		n += (s.n - 1) / l.context
	}
	return n
}

// Eval walks the file from its start in consecutive windows that do not
// overlap: window i has inputs tokens[i·context : (i+1)·context] and targets
// one token on (shard after shard, for a directory). It yields them in
// batches of up to Batch() windows, laid out as Next's, as (x, y); the last
// batch may hold fewer windows. maxBatches > 0 stops after that many
// batches. Eval is deterministic and leaves the random sequence of Next
// untouched. Each yielded slice is new, so callers may keep it.
func (l *Loader) Eval(maxBatches int) iter.Seq2[[]int32, []int32] {
	return func(yield func(x, y []int32) bool) {
		l.mustBeOpen("Eval")
		type win struct {
			s   *shard
			pos int
		}
		next := func() func() (win, bool) {
			si, wi := 0, 0
			return func() (win, bool) {
				for si < len(l.shards) {
					s := &l.shards[si]
					if wi < (s.n-1)/l.context {
						wi++
						return win{s, (wi - 1) * l.context}, true
					}
					si, wi = si+1, 0
				}
				return win{}, false
			}
		}()
		windows := l.EvalWindows()
		for start, nb := 0, 0; start < windows; start, nb = start+l.batch, nb+1 {
			if maxBatches > 0 && nb == maxBatches {
				return
			}
			k := min(l.batch, windows-start)
			x := make([]int32, k*l.context)
			y := make([]int32, k*l.context)
			for w := range k {
				v, _ := next()
				v.s.window(v.pos, x[w*l.context:(w+1)*l.context], y[w*l.context:(w+1)*l.context])
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
