package data

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

// byteEncoder is the simplest Encoder: one id per byte. It is safe for
// concurrent use and counts its calls.
type byteEncoder struct {
	vocab int
	calls atomic.Int64
}

func (e *byteEncoder) Encode(s string) []int {
	e.calls.Add(1)
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i])
	}
	return ids
}

func (e *byteEncoder) VocabSize() int {
	if e.vocab != 0 {
		return e.vocab
	}
	return 256
}

func decodeBytes(tokens []uint16) string {
	b := make([]byte, len(tokens))
	for i, t := range tokens {
		b[i] = byte(t)
	}
	return string(b)
}

// readSplits reads what Prepare wrote and checks the counts it reported.
func readSplits(t *testing.T, res PrepareResult) (train, val []uint16) {
	t.Helper()
	train, err := ReadTokens(res.TrainPath)
	if err != nil {
		t.Fatal(err)
	}
	val, err = ReadTokens(res.ValPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(train) != res.TrainTokens || len(val) != res.ValTokens {
		t.Fatalf("files hold %d + %d tokens, result says %d + %d", len(train), len(val), res.TrainTokens, res.ValTokens)
	}
	return train, val
}

func TestPrepareRoundTrip(t *testing.T) {
	text := Austen()[:600_000]
	dir := filepath.Join(t.TempDir(), "new", "dir")
	var progress []int
	enc := &byteEncoder{}
	res, err := Prepare([]string{text}, enc, dir, PrepareOptions{
		Progress: func(done, total int) {
			if total != len(text) {
				t.Errorf("progress total %d, want %d", total, len(text))
			}
			progress = append(progress, done)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TrainPath != filepath.Join(dir, TrainFile) || res.ValPath != filepath.Join(dir, ValFile) {
		t.Errorf("paths %s, %s", res.TrainPath, res.ValPath)
	}
	train, val := readSplits(t, res)
	if got := decodeBytes(train) + decodeBytes(val); got != text {
		t.Fatal("train + val decoded differs from the text")
	}
	if want := len(text) / 10; res.ValTokens != want {
		t.Errorf("ValTokens = %d, want a tenth, %d", res.ValTokens, want)
	}
	if res.Tokens() != len(text) || res.TextBytes != len(text) {
		t.Errorf("Tokens() = %d, TextBytes = %d; want %d", res.Tokens(), res.TextBytes, len(text))
	}
	// 600 KB in pieces of at most 256 KiB: three pieces, one call each.
	if res.Chunks != 3 || enc.calls.Load() != 3 || len(progress) != 3 {
		t.Errorf("Chunks = %d, Encode calls = %d, progress calls = %d; want 3 each", res.Chunks, enc.calls.Load(), len(progress))
	}
	if !slices.IsSorted(progress) || progress[len(progress)-1] != len(text) {
		t.Errorf("progress %v does not rise to %d", progress, len(text))
	}
}

func TestPrepareDocumentsAndParallel(t *testing.T) {
	texts := []string{
		Austen()[:70_000],
		"A short second document.\n",
		Austen()[2_000_000:2_050_000],
	}
	whole := strings.Join(texts, "")
	opts := PrepareOptions{ChunkBytes: 4096, ValFraction: 0.25, Context: 64}
	seqDir, parDir := t.TempDir(), t.TempDir()
	seq, err := Prepare(texts, &byteEncoder{}, seqDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Parallel = true
	var progress []int
	opts.Progress = func(done, total int) { progress = append(progress, done) }
	par, err := Prepare(texts, &byteEncoder{}, parDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	st, sv := readSplits(t, seq)
	pt, pv := readSplits(t, par)
	if !slices.Equal(st, pt) || !slices.Equal(sv, pv) {
		t.Error("Parallel changed the token files")
	}
	if decodeBytes(st)+decodeBytes(sv) != whole {
		t.Error("documents were not concatenated as given")
	}
	if par.Chunks < 30 || len(progress) != par.Chunks || progress[len(progress)-1] != len(whole) || !slices.IsSorted(progress) {
		t.Errorf("%d chunks, progress %d calls ending at %d", par.Chunks, len(progress), progress[len(progress)-1])
	}
	if want := (len(whole) + 2) / 4; seq.ValTokens != want {
		t.Errorf("ValTokens = %d, want a quarter of %d", seq.ValTokens, len(whole))
	}
}

func TestPrepareMinimumWindow(t *testing.T) {
	// 10% of 300 tokens is 30, less than a window of 65: val gets 65.
	text := strings.Repeat("abc", 100)
	res, err := Prepare([]string{text}, &byteEncoder{}, t.TempDir(), PrepareOptions{Context: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.ValTokens != 65 || res.TrainTokens != 235 {
		t.Errorf("split %d + %d, want 235 + 65", res.TrainTokens, res.ValTokens)
	}
	if l, err := OpenLoader(res.ValPath, 1, 64, 1); err != nil {
		t.Errorf("the validation file does not open with the context: %v", err)
	} else {
		l.Close()
	}
}

type badEncoder struct{ byteEncoder }

func (*badEncoder) Encode(s string) []int { return []int{1, 2, 300, 4} }

func TestPrepareErrors(t *testing.T) {
	dir := t.TempDir()
	text := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name  string
		texts []string
		enc   Encoder
		opts  PrepareOptions
		want  []string
	}{
		{"vocab", []string{text}, &byteEncoder{vocab: 70000}, PrepareOptions{}, []string{"70000 ids", "uint16", "at most 65536"}},
		{"id beyond vocab", []string{text}, &badEncoder{}, PrepareOptions{}, []string{"returned id 300, outside 0..255", "token 2 of the piece of document 0 starting at byte 0", "VocabSize (256)"}},
		{"too small", []string{"tiny"}, &byteEncoder{}, PrepareOptions{}, []string{"4 tokens", "need at least 514", "smaller context"}},
		{"fraction", []string{text}, &byteEncoder{}, PrepareOptions{ValFraction: 1}, []string{"ValFraction 1"}},
		{"negative fraction", []string{text}, &byteEncoder{}, PrepareOptions{ValFraction: -0.1}, []string{"ValFraction -0.1"}},
		{"id beyond vocab, parallel", []string{text}, &badEncoder{}, PrepareOptions{Parallel: true, ChunkBytes: 100},
			[]string{"returned id 300", "of the piece of document 0 starting at byte 0)"}},
		{"nil encoder", []string{text}, nil, PrepareOptions{}, []string{"no encoder"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Prepare(tc.texts, tc.enc, dir, tc.opts)
			if err == nil {
				t.Fatal("Prepare succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed Prepare calls left %d files", len(entries))
	}
}

func TestSplitText(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", " ", "\n", "\n\n", "é", "日本", "🙂"}
	for trial := range 300 {
		var b strings.Builder
		for range r.IntN(3000) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		size := 1 + r.IntN(200)
		pieces := splitText(s, size)
		if strings.Join(pieces, "") != s {
			t.Fatalf("trial %d: pieces do not join to the text", trial)
		}
		for i, p := range pieces {
			if p == "" || len(p) > max(size, utf8.UTFMax) {
				t.Fatalf("trial %d: piece %d has %d bytes, size %d", trial, i, len(p), size)
			}
			if !utf8.ValidString(p) {
				t.Fatalf("trial %d: piece %d cuts a character: %q", trial, i, p)
			}
		}
	}
	// Paragraph breaks win over later newlines and spaces.
	got := splitText("aaaa aaaa\n\nbbbb\nbb bbbbb", 16)
	if got[0] != "aaaa aaaa\n\n" {
		t.Errorf("first piece %q, want it to end at the blank line", got[0])
	}
}

type panicEncoder struct{ byteEncoder }

func (e *panicEncoder) Encode(s string) []int {
	if strings.Contains(s, "boom") {
		panic("tokenizer exploded")
	}
	return e.byteEncoder.Encode(s)
}

func TestPrepareParallelPanicReachesCaller(t *testing.T) {
	text := strings.Repeat("quiet text. ", 1000) + "boom" + strings.Repeat(" more quiet text.", 1000)
	defer func() {
		if r := recover(); r != "tokenizer exploded" {
			t.Errorf("recovered %v, want the encoder's panic", r)
		}
	}()
	Prepare([]string{text}, &panicEncoder{}, t.TempDir(), PrepareOptions{Parallel: true, ChunkBytes: 500, Context: 8})
	t.Error("Prepare returned")
}
