package dataset

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/forgeml/forge/forge/data"
	"github.com/forgeml/forge/forge/tokenizer"
	"github.com/forgeml/forge/internal/atomicfile"
)

// Names Prepare writes in its output directory.
const (
	TrainDir      = "train"
	ValDir        = "val"
	TokenizerFile = "tokenizer.json"
	ReportFile    = "sources.json"
)

// Defaults of Options' zero fields.
const (
	DefaultShardTokens = 100_000_000 // 200 MB a shard
	DefaultSampleBytes = 64 << 20
	DefaultChunkBytes  = 1 << 20
)

// Options tune Prepare.
type Options struct {
	// Tokenizer encodes the text; nil trains one (Kind "bpe" of Vocab
	// ids, or "char") on the first SampleBytes of the mixture.
	Tokenizer   tokenizer.Tokenizer
	Kind        string // "bpe" (default) or "char"
	Vocab       int    // BPE vocabulary (default 4096)
	SampleBytes int64  // bytes of the mixture the tokenizer trains on (default 64 MB)

	ShardTokens int     // tokens per shard file (default 100 M)
	ValFraction float64 // share of chunks held out (default 0.1; evenly spread)
	Context     int     // each split must get at least Context+1 tokens (default 256)
	MaxBytes    int64   // stop after this much text (0: until a source runs out)
	ChunkBytes  int     // text encoded as one unit (default 1 MB; cut at document ends)
	Workers     int     // encoding goroutines (default: the cores)

	// Progress is called about once a second and at the end.
	Progress func(Progress)
}

// Progress is how far Prepare is.
type Progress struct {
	Phase       string // "sample" (training the tokenizer) or "encode"
	Bytes       int64  // text read so far
	Tokens      int64  // tokens written so far
	Elapsed     time.Duration
	TotalBytes  int64 // the budget or the local files' size, 0 if unknown
	Done        bool
	ShardsTrain int
	ShardsVal   int
}

// ETA is the time left at the current rate, 0 if unknown.
func (p Progress) ETA() time.Duration {
	if p.TotalBytes <= 0 || p.Bytes <= 0 || p.Bytes >= p.TotalBytes {
		return 0
	}
	return time.Duration(float64(p.Elapsed) * float64(p.TotalBytes-p.Bytes) / float64(p.Bytes))
}

// SourceReport is what one source contributed.
type SourceReport struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	Weight    float64 `json:"weight"`
	Share     float64 `json:"share"` // of the weights
	Licence   string  `json:"licence,omitempty"`
	Documents int64   `json:"documents"`
	Bytes     int64   `json:"bytes"`
	Tokens    int64   `json:"tokens"`
}

// Report is what Prepare wrote.
type Report struct {
	Sources     []SourceReport `json:"sources"`
	Exhausted   string         `json:"exhausted,omitempty"` // the source that ran out and ended the mixture
	Bytes       int64          `json:"bytes"`
	TrainTokens int64          `json:"train_tokens"`
	ValTokens   int64          `json:"val_tokens"`
	TrainShards int            `json:"train_shards"`
	ValShards   int            `json:"val_shards"`
	Tokenizer   string         `json:"tokenizer"`
	Vocab       int            `json:"vocab"`
	SampleBytes int64          `json:"sample_bytes,omitempty"` // the tokenizer's training sample
	Seconds     float64        `json:"seconds"`
}

func (o *Options) fill() error {
	if o.Kind == "" {
		o.Kind = "bpe"
	}
	if o.Vocab == 0 {
		o.Vocab = 4096
	}
	if o.SampleBytes == 0 {
		o.SampleBytes = DefaultSampleBytes
	}
	if o.ShardTokens == 0 {
		o.ShardTokens = DefaultShardTokens
	}
	if o.ValFraction == 0 {
		o.ValFraction = 0.1
	}
	if o.Context == 0 {
		o.Context = 256
	}
	if o.ChunkBytes == 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.Workers == 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	switch {
	case o.Kind != "bpe" && o.Kind != "char":
		return fmt.Errorf("dataset: tokenizer kind %q: want bpe or char", o.Kind)
	case o.ValFraction < 0 || o.ValFraction >= 1:
		return fmt.Errorf("dataset: validation fraction %g: want 0 < f < 1", o.ValFraction)
	case o.ShardTokens <= o.Context:
		return fmt.Errorf("dataset: shard size %d tokens: want more than the context %d", o.ShardTokens, o.Context)
	case o.SampleBytes < 0 || o.MaxBytes < 0 || o.ChunkBytes < 1 || o.Workers < 1:
		return errors.New("dataset: sample size, byte budget, chunk size and workers must be positive")
	}
	return nil
}

// Prepare writes the mixture of srcs to out: tokenizer.json, train/ and
// val/ (numbered shards of llm.c token files), sources.json (the report),
// and data's manifest.json last, which marks the set complete (an older
// set in out stops counting as soon as Prepare starts). Documents are
// separated by a blank line. The text is cut into chunks at document
// boundaries, a document longer than a chunk at a paragraph break, line
// or space (data.SplitText; its pieces are encoded separately);
// every 1/ValFraction-th chunk goes to validation, so the split does not
// depend on how many cores encode.
func Prepare(ctx context.Context, srcs []*Source, out string, opts Options) (*Report, error) {
	start := time.Now()
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if len(srcs) == 0 {
		return nil, errors.New("dataset: no sources")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("dataset: %v", err)
	}
	if err := data.RemoveManifest(out); err != nil {
		return nil, err
	}
	// A one-shot set's files would be taken for this set's.
	for _, f := range []string{data.TrainFile, data.ValFile} {
		if err := os.Remove(filepath.Join(out, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("dataset: %v", err)
		}
	}
	for _, d := range []string{TrainDir, ValDir} {
		if err := os.RemoveAll(filepath.Join(out, d)); err != nil {
			return nil, fmt.Errorf("dataset: %v", err)
		}
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return nil, fmt.Errorf("dataset: %v", err)
		}
	}
	var total int64
	for _, s := range srcs {
		for _, p := range s.Paths {
			if fi, err := os.Stat(p); err == nil {
				total += fi.Size()
			}
		}
	}
	if opts.MaxBytes > 0 && (total == 0 || opts.MaxBytes < total) {
		total = opts.MaxBytes
	}
	rep := &Report{}
	var wsum float64
	for _, s := range srcs {
		wsum += s.Weight
	}
	for _, s := range srcs {
		rep.Sources = append(rep.Sources, SourceReport{Name: s.Name, Kind: s.Kind, Weight: s.Weight, Share: s.Weight / wsum, Licence: s.Licence})
	}

	tok := opts.Tokenizer
	if tok == nil {
		var sample strings.Builder
		_, err := mix(ctx, srcs, func(d doc) (bool, error) {
			sample.WriteString(d.text)
			sample.WriteString("\n\n")
			return int64(sample.Len()) >= opts.SampleBytes, nil
		})
		if err != nil {
			return nil, err
		}
		rep.SampleBytes = int64(sample.Len())
		if opts.Progress != nil {
			opts.Progress(Progress{Phase: "sample", Bytes: rep.SampleBytes, Elapsed: time.Since(start)})
		}
		if opts.Kind == "char" {
			tok = tokenizer.TrainChar(sample.String())
		} else {
			bpe, err := tokenizer.TrainBPE(sample.String(), opts.Vocab, tokenizer.BPEOptions{})
			if err != nil {
				return nil, err
			}
			tok = bpe
		}
	}
	if tok.VocabSize() > data.MaxVocab {
		return nil, fmt.Errorf("dataset: the tokenizer has %d ids; token files hold at most %d", tok.VocabSize(), data.MaxVocab)
	}
	rep.Tokenizer, rep.Vocab = tok.Kind(), tok.VocabSize()
	if err := tok.Save(filepath.Join(out, TokenizerFile)); err != nil {
		return nil, err
	}

	train := &shardWriter{dir: filepath.Join(out, TrainDir), max: opts.ShardTokens}
	val := &shardWriter{dir: filepath.Join(out, ValDir), max: opts.ShardTokens}
	defer train.abort()
	defer val.abort()
	err := encode(ctx, srcs, tok, opts, rep, total, start, train, val)
	if err != nil {
		return nil, err
	}
	if err := train.close(); err != nil {
		return nil, err
	}
	if err := val.close(); err != nil {
		return nil, err
	}
	rep.TrainShards, rep.ValShards = len(train.files), len(val.files)
	for _, w := range []*shardWriter{train, val} {
		for _, n := range w.counts {
			if n <= int64(opts.Context) {
				return nil, fmt.Errorf("dataset: a %s shard of %d tokens is too short for context %d; give more text, a larger --val fraction or larger shards", filepath.Base(w.dir), n, opts.Context)
			}
		}
	}
	if rep.ValTokens == 0 {
		return nil, fmt.Errorf("dataset: only %s of text in %d-byte chunks: too little for a validation split (one chunk in %.0f); give more text or a smaller --chunk", humanBytes(rep.Bytes), opts.ChunkBytes, 1/opts.ValFraction)
	}
	rep.Seconds = time.Since(start).Seconds()
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := atomicfile.WriteBytes(filepath.Join(out, ReportFile), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("dataset: %v", err)
	}
	names := []string{TokenizerFile, ReportFile}
	for _, w := range []*shardWriter{train, val} {
		for _, f := range w.files {
			rel, _ := filepath.Rel(out, f)
			names = append(names, filepath.ToSlash(rel))
		}
	}
	if err := data.WriteManifest(out, names...); err != nil {
		return nil, err
	}
	return rep, nil
}

// chunk is a run of documents encoded as one unit.
type chunk struct {
	index int
	docs  []doc
	bytes int
	ids   []uint16
	per   []int64 // tokens per source
	err   error
}

// encode reads the mixture, encodes chunks on Workers goroutines and
// writes them in order.
func encode(ctx context.Context, srcs []*Source, tok tokenizer.Tokenizer, opts Options, rep *Report, total int64, start time.Time, train, val *shardWriter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	todo := make(chan *chunk, opts.Workers)
	done := make(chan *chunk, opts.Workers)
	var wg sync.WaitGroup
	vocab := tok.VocabSize()
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range todo {
				c.per = make([]int64, len(srcs))
				for _, d := range c.docs {
					ids := tok.Encode(d.text)
					for _, id := range ids {
						if id < 0 || id >= vocab {
							c.err = fmt.Errorf("dataset: the tokenizer returned id %d outside 0..%d", id, vocab-1)
							break
						}
						c.ids = append(c.ids, uint16(id))
					}
					c.per[d.src] += int64(len(ids))
				}
				c.docs = nil
				select {
				case done <- c:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	// The reader: the mixture, cut into chunks.
	var readErr error
	exhausted := -1
	go func() {
		defer close(todo)
		cur := &chunk{}
		var read int64
		send := func() bool {
			if len(cur.docs) == 0 {
				return true
			}
			select {
			case todo <- cur:
			case <-ctx.Done():
				return false
			}
			cur = &chunk{index: cur.index + 1}
			return true
		}
		exhausted, readErr = mix(ctx, srcs, func(d doc) (bool, error) {
			if !strings.HasSuffix(d.text, "\n\n") {
				d.text += map[bool]string{true: "\n", false: "\n\n"}[strings.HasSuffix(d.text, "\n")]
			}
			rep.Sources[d.src].Documents++
			// A document longer than a chunk is cut (at a paragraph break,
			// line or space where it can be), so that chunks, and the
			// validation split, stay even.
			for _, piece := range data.SplitText(d.text, opts.ChunkBytes) {
				if cur.bytes > 0 && cur.bytes+len(piece) > opts.ChunkBytes {
					if !send() {
						return true, nil
					}
				}
				cur.docs = append(cur.docs, doc{text: piece, src: d.src})
				cur.bytes += len(piece)
				read += int64(len(piece))
				rep.Sources[d.src].Bytes += int64(len(piece))
			}
			return opts.MaxBytes > 0 && read >= opts.MaxBytes, nil
		})
		send()
	}()
	go func() { wg.Wait(); close(done) }()

	// The writer: chunks in order.
	pending := map[int]*chunk{}
	next := 0
	last := time.Now()
	var tokens int64
	var werr error
	for c := range done {
		if werr != nil {
			continue
		}
		pending[c.index] = c
		for {
			c, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			if c.err != nil {
				werr = c.err
				cancel()
				break
			}
			w := train
			if isVal(next, opts.ValFraction) {
				w = val
				rep.ValTokens += int64(len(c.ids))
			} else {
				rep.TrainTokens += int64(len(c.ids))
			}
			if err := w.write(c.ids); err != nil {
				werr = err
				cancel()
				break
			}
			for i, n := range c.per {
				rep.Sources[i].Tokens += n
			}
			rep.Bytes += int64(c.bytes)
			tokens += int64(len(c.ids))
			next++
			if opts.Progress != nil && time.Since(last) >= time.Second {
				last = time.Now()
				opts.Progress(Progress{Phase: "encode", Bytes: rep.Bytes, Tokens: tokens, Elapsed: time.Since(start), TotalBytes: total,
					ShardsTrain: len(train.files), ShardsVal: len(val.files)})
			}
		}
	}
	if werr != nil {
		return werr
	}
	if readErr != nil {
		return readErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if exhausted >= 0 && len(srcs) > 1 {
		rep.Exhausted = srcs[exhausted].Name
	}
	if opts.Progress != nil {
		opts.Progress(Progress{Phase: "encode", Bytes: rep.Bytes, Tokens: tokens, Elapsed: time.Since(start), TotalBytes: rep.Bytes, Done: true,
			ShardsTrain: len(train.files) + 1, ShardsVal: len(val.files) + 1})
	}
	return nil
}

// isVal reports whether chunk i is held out: chunks where the running
// count of validation chunks, ⌊(i+1)·f⌋, steps up.
func isVal(i int, f float64) bool {
	return int(float64(i+1)*f) > int(float64(i)*f)
}

// shardWriter writes token files of at most max tokens, 000000.bin, …,
// each through a temporary file renamed into place once complete.
type shardWriter struct {
	dir    string
	max    int
	files  []string // complete shards
	counts []int64
	f      *os.File
	n      int
	buf    []byte
}

func (w *shardWriter) write(ids []uint16) error {
	for len(ids) > 0 {
		if w.f == nil {
			if err := w.open(); err != nil {
				return err
			}
		}
		k := min(len(ids), w.max-w.n)
		w.buf = w.buf[:0]
		for _, id := range ids[:k] {
			w.buf = binary.LittleEndian.AppendUint16(w.buf, id)
		}
		if _, err := w.f.Write(w.buf); err != nil {
			return fmt.Errorf("dataset: writing %s: %v", w.f.Name(), err)
		}
		w.n += k
		ids = ids[k:]
		if w.n == w.max {
			if err := w.finish(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *shardWriter) open() error {
	f, err := os.CreateTemp(w.dir, ".shard-*.tmp")
	if err != nil {
		return fmt.Errorf("dataset: %v", err)
	}
	if _, err := f.Write(make([]byte, data.HeaderBytes)); err != nil {
		f.Close()
		return fmt.Errorf("dataset: writing %s: %v", f.Name(), err)
	}
	w.f, w.n = f, 0
	return nil
}

// finish writes the header with the count, syncs and renames the shard.
func (w *shardWriter) finish() error {
	f := w.f
	w.f = nil
	_, err := f.WriteAt(data.Header(w.n), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	name := filepath.Join(w.dir, fmt.Sprintf("%06d.bin", len(w.files)))
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("dataset: writing %s: %v", name, err)
	}
	w.files = append(w.files, name)
	w.counts = append(w.counts, int64(w.n))
	return nil
}

// close finishes a partly filled shard.
func (w *shardWriter) close() error {
	if w.f == nil || w.n == 0 {
		w.abort()
		atomicfile.SyncDir(w.dir)
		return nil
	}
	err := w.finish()
	atomicfile.SyncDir(w.dir)
	return err
}

// abort removes an unfinished shard.
func (w *shardWriter) abort() {
	if w.f != nil {
		name := w.f.Name()
		w.f.Close()
		os.Remove(name)
		w.f = nil
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
