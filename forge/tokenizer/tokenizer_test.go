package tokenizer

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// austenPaths are where the Austen corpus may be found: the copy the data
// package embeds, then the machine-wide copy.
var austenPaths = []string{
	filepath.Join("..", "data", "corpus", "austen.txt.gz"),
	"/work/shared/data/austen.txt.gz",
}

var austen = sync.OnceValues(func() (string, error) {
	for _, p := range austenPaths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(zr)
		return string(b), err
	}
	return "", errors.New("Austen corpus not found")
})

func austenText(tb testing.TB) string {
	tb.Helper()
	text, err := austen()
	if err != nil {
		tb.Skip(err)
	}
	return text
}

// austenBPE is the 4096-token tokenizer trained on the whole corpus, once
// per test binary.
type trained struct {
	tok     *BPE
	elapsed time.Duration
}

var austenBPE = sync.OnceValues(func() (trained, error) {
	text, err := austen()
	if err != nil {
		return trained{}, err
	}
	start := time.Now()
	tok, err := TrainBPE(text, 4096, BPEOptions{})
	return trained{tok, time.Since(start)}, err
})

func austen4096(tb testing.TB) (*BPE, time.Duration) {
	tb.Helper()
	austenText(tb)
	tr, err := austenBPE()
	if err != nil {
		tb.Fatal(err)
	}
	return tr.tok, tr.elapsed
}

// sampleText is a small multilingual text for tests that must not depend
// on the corpus.
const sampleText = `The quick brown fox jumps over the lazy dog. It's 2024, and the dog's
owner said: "Don't!" -- twice, then 3 more times... Naïve café crème, déjà vu.
Ελληνικά γράμματα και αριθμοί 12345. Русский текст тоже есть. 日本語の文も少し。
Emoji 🙂🙂 and flags 🇫🇷, tabs	here,    spaces there, and a line

with blank lines above. ` + "`code(x) == y && z != 0;`"

var sampleBPE = sync.OnceValue(func() *BPE {
	tok, err := TrainBPE(strings.Repeat(sampleText, 3), 600, BPEOptions{})
	if err != nil {
		panic(err)
	}
	return tok
})

// trickyInputs must all round-trip through every tokenizer.
var trickyInputs = []string{
	"",
	" ",
	"a",
	"\x00",
	"a\x00b\x00\x00",
	"\xff\xfe",
	"\xff",
	"\x80abc\xc3",      // stray continuation byte, truncated sequence
	"\xed\xa0\x80",     // an encoded surrogate (invalid)
	"\xef\xbf\xbd",     // a literal U+FFFD
	"\xf4\x90\x80\x80", // beyond U+10FFFF
	"\xc0\xaf",         // overlong
	"héllo wörld",      // precomposed
	"he\u0301llo",      // combining accent
	"Привет, мир! 你好，世界。مرحبا",
	"🙂👍🏽👨‍👩‍👧 🇫🇷",
	"   ",
	strings.Repeat(" ", 1000),
	strings.Repeat("\n", 300) + "x",
	" \t \n \r\n\v\f\u00a0\u3000x",
	"don't I'LL they've 'tis ''s '",
	"1234567890 3.14159 -42",
	strings.Repeat("a", 1000),
	strings.Repeat("ab", 700),
	strings.Repeat("é", 300),
	strings.Repeat("\xff", 600),
	strings.Repeat("-=", 400),
	"tail space ",
	"\\ backslash \\x41",
}

func TestSplitExamples(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello world", []string{"Hello", " world"}},
		{"Hello  world", []string{"Hello", " ", " world"}},
		{"\n\n  Emma", []string{"\n\n ", " Emma"}},
		{"\n\nEmma", []string{"\n\n", "Emma"}},
		{"a\t b", []string{"a", "\t", " b"}},
		{"a \tb", []string{"a", " \t", "b"}},
		{"end  ", []string{"end", "  "}},
		{"don't", []string{"don", "'t"}},
		{"they'll WE'RE", []string{"they", "'ll", " WE", "'RE"}},
		{"'tis 'sup", []string{"'", "tis", " '", "sup"}},
		{"It's", []string{"It", "'s"}},
		{"x 's", []string{"x", " '", "s"}},
		{"2024 12345", []string{"202", "4", " 123", "45"}},
		{"abc123def", []string{"abc", "123", "def"}},
		{`Mr. "Knightley"!`, []string{"Mr", ".", ` "`, "Knightley", `"!`}},
		{"a -- b", []string{"a", " --", " b"}},
		{"café", []string{"café"}},
		{"he\u0301llo", []string{"he\u0301llo"}},
		{"日本語。", []string{"日本語", "。"}},
		{"a\xffb", []string{"a", "\xff", "b"}},
		{" \xff\xfe", []string{" \xff\xfe"}},
		{"x\u00a0y", []string{"x", "\u00a0", "y"}},
		{"٣٤٥٦", []string{"٣٤٥", "٦"}},
		{"🙂🙂 ok", []string{"🙂🙂", " ok"}},
	}
	for _, tc := range tests {
		if got := chunksOf(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("split %q = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func chunksOf(s string) []string {
	var out []string
	for len(s) > 0 {
		n := nextChunk(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func TestSplitLongRuns(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes of letters
	got := chunksOf(" " + long)
	if len(got) != 2 || len(got[0]) > maxChunkBytes || got[0][0] != ' ' {
		t.Fatalf("split of a long run: %d chunks, lengths %v", len(got), lens(got))
	}
	if !utf8.ValidString(got[0]) || !utf8.ValidString(got[1]) {
		t.Errorf("a long run was cut inside a character: %v", lens(got))
	}
	if got := chunksOf(strings.Repeat("7", 10)); len(got) != 4 || got[3] != "7" {
		t.Errorf("digits: %q", got)
	}
}

func lens(ss []string) []int {
	var n []int
	for _, s := range ss {
		n = append(n, len(s))
	}
	return n
}

// checkChunks verifies the invariants of the split of s: chunks are not
// empty, not longer than maxChunkBytes, start at character boundaries and
// concatenate to s.
func checkChunks(t *testing.T, s string) {
	t.Helper()
	boundary := map[int]bool{len(s): true}
	for i := 0; i < len(s); {
		boundary[i] = true
		_, n := charAt(s[i:])
		i += n
	}
	var b strings.Builder
	for _, c := range chunksOf(s) {
		if len(c) == 0 || len(c) > maxChunkBytes {
			t.Fatalf("split %q: chunk of %d bytes", s, len(c))
		}
		if !boundary[b.Len()] {
			t.Fatalf("split %q: chunk starts inside a character at byte %d", s, b.Len())
		}
		b.WriteString(c)
	}
	if b.String() != s {
		t.Fatalf("split %q: chunks concatenate to %q", s, b.String())
	}
}

func TestSplitProperties(t *testing.T) {
	for _, s := range trickyInputs {
		checkChunks(t, s)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{" ", "  ", "\n", "\t", "a", "Z", "é", "日", "1", "٣", "'", "s", "ll", ".", "\xff", "\xe6\x97", "🙂", "\u00a0", "\u0301"}
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(400) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		checkChunks(t, b.String())
	}
}

// TestClassicExample trains on the textbook string "aaabdaaabac". Worked
// by hand: pair counts are aa 4, ab 2, then 1 each, so "aa" becomes 256
// and the word reads 256 a b d 256 a b a c. Now (256,a) and (a,b) both
// occur twice; the tie goes to the smaller left id, a=97, so "ab" becomes
// 257: 256 257 d 256 257 a c. (256,257) occurs twice and becomes 258:
// 258 d 258 a c. Every pair now occurs once; the smallest is (a,c) =
// (97,99), token 259, then (d,258) = (100,258), token 260.
func TestClassicExample(t *testing.T) {
	tok, err := TrainBPE("aaabdaaabac", 261, BPEOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{'a', 'a'}, {'a', 'b'}, {256, 257}, {'a', 'c'}, {'d', 258}}
	if got := tok.Merges(); !slices.Equal(got, want) {
		t.Fatalf("merges = %v, want %v", got, want)
	}
	for id, s := range map[int]string{256: "aa", 257: "ab", 258: "aaab", 259: "ac", 260: "daaab"} {
		if got := string(tok.TokenBytes(id)); got != s {
			t.Errorf("token %d = %q, want %q", id, got, s)
		}
	}

	tok3, _ := TrainBPE("aaabdaaabac", 259, BPEOptions{})
	if got, want := tok3.Encode("aaabdaaabac"), []int{258, 'd', 258, 'a', 'c'}; !slices.Equal(got, want) {
		t.Errorf("encode with 3 merges = %v, want %v", got, want)
	}
	if got, want := tok.Encode("aaabdaaabac"), []int{258, 260, 259}; !slices.Equal(got, want) {
		t.Errorf("encode with 5 merges = %v, want %v", got, want)
	}
	// Merges apply by rank, not left to right: in "aab" the pair "aa"
	// (256) outranks "ab" (257).
	if got, want := tok3.Encode("aab"), []int{256, 'b'}; !slices.Equal(got, want) {
		t.Errorf(`encode "aab" = %v, want %v`, got, want)
	}
	// "aaaa" merges left to right without overlap.
	if got, want := tok3.Encode("aaaaa"), []int{256, 256, 'a'}; !slices.Equal(got, want) {
		t.Errorf(`encode "aaaaa" = %v, want %v`, got, want)
	}
	// The text runs out of pairs: training stops early.
	all, _ := TrainBPE("aaabdaaabac", 1000, BPEOptions{})
	if all.VocabSize() >= 1000 || !slices.Equal(all.Encode("aaabdaaabac"), []int{all.VocabSize() - 1}) {
		t.Errorf("training to exhaustion: vocab %d, encoding %v", all.VocabSize(), all.Encode("aaabdaaabac"))
	}
}

// referenceTrain is the textbook algorithm: recount every pair in every
// word before each merge.
func referenceTrain(text string, vocabSize int) [][2]int {
	freq := map[string]int64{}
	for _, c := range chunksOf(text) {
		freq[c]++
	}
	type word struct {
		ids []int
		f   int64
	}
	var words []word
	for c, f := range freq {
		w := word{f: f}
		for i := 0; i < len(c); i++ {
			w.ids = append(w.ids, int(c[i]))
		}
		words = append(words, w)
	}
	var merges [][2]int
	for id := 256; id < vocabSize; id++ {
		counts := map[[2]int]int64{}
		for _, w := range words {
			for i := 0; i+1 < len(w.ids); i++ {
				counts[[2]int{w.ids[i], w.ids[i+1]}] += w.f
			}
		}
		var best [2]int
		var bestCount int64
		for p, c := range counts {
			if c > bestCount || c == bestCount && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestCount = p, c
			}
		}
		if bestCount == 0 {
			break
		}
		merges = append(merges, best)
		for k, w := range words {
			var out []int
			for i := 0; i < len(w.ids); i++ {
				if i+1 < len(w.ids) && w.ids[i] == best[0] && w.ids[i+1] == best[1] {
					out = append(out, id)
					i++
				} else {
					out = append(out, w.ids[i])
				}
			}
			words[k].ids = out
		}
	}
	return merges
}

func TestTrainMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	texts := map[string]string{
		"sample": sampleText,
		"aab":    randomText(rng, []string{"a", "a", "b", " ", "aa"}, 3000),
		"mixed":  randomText(rng, []string{"ab", "ba", " ", "a", "\n", "é", "1", "\xff", "--"}, 4000),
		// Chunks of 256 bytes full of overlapping occurrences.
		"long": randomText(rng, []string{"a", "b", "c", "aaa", "abab"}, 20000),
	}
	if a, err := austen(); err == nil {
		texts["austen100k"] = a[:100_000]
	}
	for name, text := range texts {
		for _, v := range []int{256, 300, 700} {
			tok, err := TrainBPE(text, v, BPEOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tok.Merges(), referenceTrain(text, v); !slices.Equal(got, want) {
				t.Errorf("%s, vocab %d: incremental training differs from the reference\n got %v\nwant %v", name, v, head(got), head(want))
			}
		}
	}
}

func head(m [][2]int) string {
	if len(m) > 20 {
		return fmt.Sprint(m[:20], "...")
	}
	return fmt.Sprint(m)
}

func randomText(rng *rand.Rand, pieces []string, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func TestTrainDeterministic(t *testing.T) {
	text := sampleText
	if a, err := austen(); err == nil {
		text = a[:500_000]
	}
	a, _ := TrainBPE(text, 1500, BPEOptions{})
	b, _ := TrainBPE(text, 1500, BPEOptions{})
	if !slices.Equal(a.Merges(), b.Merges()) {
		t.Fatal("training twice on the same text gave different merges")
	}
	if !bytes.Equal(a.Marshal(), b.Marshal()) {
		t.Fatal("training twice gave different files")
	}
}

func TestTrainProgress(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	text := randomText(rng, []string{" ", "a", "e", "i", "o", "u", "th", "s", "t", "r", "n", "l", "k"}, 100_000)
	for _, v := range []int{256, 257, 300, 999, 1000, 1001, 1256, 2457} {
		var calls [][2]int
		tok, _ := TrainBPE(text, v, BPEOptions{Progress: func(done, total int) {
			calls = append(calls, [2]int{done, total})
		}})
		if tok.VocabSize() != v {
			t.Fatalf("vocab %d: training stopped early at %d", v, tok.VocabSize())
		}
		if len(calls) == 0 || len(calls) > 101 {
			t.Fatalf("vocab %d: %d progress calls, want 1..101", v, len(calls))
		}
		for i, c := range calls {
			if c[1] != v-256 || c[0] > c[1] || i > 0 && c[0] <= calls[i-1][0] && v > 256 {
				t.Fatalf("vocab %d: bad progress sequence %v", v, calls)
			}
		}
		if last := calls[len(calls)-1]; last[0] != tok.VocabSize()-256 {
			t.Errorf("vocab %d: last progress call %v, but %d merges were made", v, last, tok.VocabSize()-256)
		}
	}
}

func TestTrainProgressEarlyStop(t *testing.T) {
	var last [2]int
	calls := 0
	tok, _ := TrainBPE("aaabdaaabac", 1000, BPEOptions{Progress: func(done, total int) {
		last = [2]int{done, total}
		calls++
	}})
	if want := [2]int{tok.VocabSize() - 256, 1000 - 256}; last != want || calls > 101 {
		t.Errorf("last progress call %v after %d calls, want %v", last, calls, want)
	}
}

func TestTrainErrors(t *testing.T) {
	for _, v := range []int{-1, 0, 255, MaxVocabSize + 1} {
		_, err := TrainBPE("abc", v, BPEOptions{})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("vocabSize %d is out of range", v)) {
			t.Errorf("TrainBPE(vocab %d): error %v", v, err)
		}
	}
	tok, err := TrainBPE("", 1000, BPEOptions{})
	if err != nil || tok.VocabSize() != 256 {
		t.Errorf("training on empty text: %v, vocab %d", err, tok.VocabSize())
	}
}

func tokenizers(t *testing.T) map[string]Tokenizer {
	m := map[string]Tokenizer{
		"bpe-sample":  sampleBPE(),
		"char-sample": TrainChar(sampleText),
		"bpe-bytes":   newBPE(nil),
		"char-empty":  TrainChar(""),
	}
	if _, err := austen(); err == nil {
		m["bpe-austen"], _ = austen4096(t)
	}
	return m
}

func TestRoundTripTricky(t *testing.T) {
	for name, tok := range tokenizers(t) {
		for _, s := range trickyInputs {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("%s: Encode(%q) gave id %d outside 0..%d", name, s, id, tok.VocabSize()-1)
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, got)
			}
		}
	}
}

func TestAustenBPE(t *testing.T) {
	text := austenText(t)
	tok, trainTime := austen4096(t)
	if tok.VocabSize() != 4096 {
		t.Fatalf("vocab %d, want 4096", tok.VocabSize())
	}
	fresh, err := Unmarshal(tok.Marshal()) // an empty cache
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := fresh.Encode(text)
	encodeTime := time.Since(start)
	start = time.Now()
	back := fresh.Decode(ids)
	decodeTime := time.Since(start)
	if back != text {
		i := 0
		for i < len(back) && i < len(text) && back[i] == text[i] {
			i++
		}
		t.Fatalf("the corpus does not round-trip; first difference at byte %d", i)
	}
	ratio := float64(len(text)) / float64(len(ids))
	t.Logf("Austen %d bytes: train 4096 in %v, encode in %v, decode in %v; %d tokens, %.3f bytes/token",
		len(text), trainTime.Round(time.Millisecond), encodeTime.Round(time.Millisecond),
		decodeTime.Round(time.Millisecond), len(ids), ratio)
	if ratio <= 3 {
		t.Errorf("compression %.3f bytes/token, want > 3", ratio)
	}
	// Encoding a prefix that ends at a chunk boundary gives a prefix of
	// the ids.
	cut := strings.Index(text[100_000:], "\n\n") + 100_000
	if got := fresh.Encode(text[:cut]); !slices.Equal(got, ids[:len(got)]) {
		t.Error("encoding a prefix gave different ids")
	}
}

func TestMergeHeapMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	toks := []*BPE{sampleBPE()}
	ab, _ := TrainBPE(randomText(rng, []string{"a", "b", "aa", "ab"}, 5000), 400, BPEOptions{})
	toks = append(toks, ab)
	if _, err := austen(); err == nil {
		tok, _ := austen4096(t)
		toks = append(toks, tok)
	}
	pieces := []string{"a", "b", "e", "t", "h", "th", "the", "aa", "ab", "in", "é", "\xff"}
	for _, tok := range toks {
		for range 300 {
			chunk := randomText(rng, pieces, 1+rng.IntN(120))
			if len(chunk) > maxChunkBytes {
				chunk = chunk[:maxChunkBytes]
			}
			scan := tok.mergeScan(chunk, nil)
			heap := tok.mergeHeap(chunk, nil)
			if !slices.Equal(scan, heap) {
				t.Fatalf("chunk %q: scan %v, heap %v", chunk, scan, heap)
			}
		}
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	for name, tok := range tokenizers(t) {
		path := filepath.Join(dir, name+".json")
		if err := tok.Save(path); err != nil {
			t.Fatal(err)
		}
		// Saving again replaces the file.
		if err := tok.Save(path); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Kind() != tok.Kind() || got.VocabSize() != tok.VocabSize() {
			t.Fatalf("%s: loaded %s/%d, saved %s/%d", name, got.Kind(), got.VocabSize(), tok.Kind(), tok.VocabSize())
		}
		switch tok := tok.(type) {
		case *BPE:
			if !slices.Equal(got.(*BPE).Merges(), tok.Merges()) {
				t.Errorf("%s: merges differ after loading", name)
			}
		case *Char:
			if !slices.Equal(got.(*Char).Runes(), tok.Runes()) {
				t.Errorf("%s: runes differ after loading", name)
			}
		}
		for _, s := range append([]string{sampleText}, trickyInputs...) {
			if !slices.Equal(got.Encode(s), tok.Encode(s)) {
				t.Errorf("%s: loaded tokenizer encodes %q differently", name, s)
			}
		}
		data, _ := os.ReadFile(path)
		if !bytes.HasPrefix(data, []byte("{\n  \"format\": \"forge-tokenizer\",\n  \"version\": 1,\n")) {
			t.Errorf("%s: file starts %q", name, data[:min(len(data), 60)])
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
		if info, _ := e.Info(); info.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644", e.Name(), info.Mode().Perm())
		}
	}
	if err := sampleBPE().Save(filepath.Join(dir, "missing", "tok.json")); err == nil {
		t.Error("saving into a missing directory succeeded")
	}
}

func TestFileFormat(t *testing.T) {
	tok, _ := TrainBPE("aaabdaaabac", 259, BPEOptions{})
	want := `{
  "format": "forge-tokenizer",
  "version": 1,
  "kind": "bpe",
  "vocab_size": 259,
  "split": "forge-v1",
  "merges": [
    [97, 97],
    [97, 98],
    [256, 257]
  ]
}
`
	if got := string(tok.Marshal()); got != want {
		t.Errorf("BPE file:\n%s\nwant:\n%s", got, want)
	}
	ch := TrainChar("b<a>\x00\xff")
	want = `{
  "format": "forge-tokenizer",
  "version": 1,
  "kind": "char",
  "vocab_size": 261,
  "runes": "\u0000<>ab"
}
`
	if got := string(ch.Marshal()); got != want {
		t.Errorf("char file:\n%s\nwant:\n%s", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	const head = `"format": "forge-tokenizer", "version": 1, `
	tests := []struct{ doc, want string }{
		{``, "not valid JSON (is this a file written by tokenizer.Save?)"},
		{`{"format": "forge-tokenizer"`, "not valid JSON"},
		{`{} {}`, "not valid JSON"},
		{`[1, 2]`, "malformed tokenizer document: cannot unmarshal array"},
		{`{}`, `field "format" is missing (is this a file written by tokenizer.Save?)`},
		{`{"format": "gpt2"}`, `field "format" is "gpt2", want "forge-tokenizer"`},
		{`{"format": "forge-tokenizer"}`, `field "version" is missing`},
		{`{"format": "forge-tokenizer", "version": 2}`, "format version 2 is not supported: this build reads version 1; use a matching build of forge or train the tokenizer again"},
		{`{"format": "forge-tokenizer", "version": "1"}`, "malformed tokenizer document"},
		{`{` + head + `"vocab_size": 256}`, `field "kind" is missing`},
		{`{` + head + `"kind": "wordpiece", "vocab_size": 256}`, `unknown kind "wordpiece": this build knows "bpe" and "char"`},
		{`{` + head + `"kind": "bpe", "split": "forge-v1"}`, `field "vocab_size" is missing`},
		{`{` + head + `"kind": "bpe", "vocab_size": 12, "split": "forge-v1"}`, "vocab_size 12 is out of range"},
		{`{` + head + `"kind": "bpe", "vocab_size": 256, "split": "forge-v1", "extra": 1}`, `unknown field "extra"`},
		{`{` + head + `"kind": "bpe", "vocab_size": 256}`, `field "split" is missing; want "forge-v1"`},
		{`{` + head + `"kind": "bpe", "vocab_size": 256, "split": "gpt2"}`, `split rule "gpt2" is not supported: this build splits text by rule "forge-v1"`},
		{`{` + head + `"kind": "bpe", "vocab_size": 256, "split": "forge-v1", "runes": "ab"}`, `field "runes" does not belong in a bpe tokenizer file`},
		{`{` + head + `"kind": "bpe", "vocab_size": 258, "split": "forge-v1", "merges": [[1, 2]]}`, "vocab_size is 258 but 256 byte tokens and 1 merges make 257 tokens (file corrupt or truncated?)"},
		{`{` + head + `"kind": "bpe", "vocab_size": 257, "split": "forge-v1", "merges": [[1, 2, 3]]}`, "merge 0 (token 256) has 3 ids; each merge is a pair [left, right]"},
		{`{` + head + `"kind": "bpe", "vocab_size": 257, "split": "forge-v1", "merges": [[1, "x"]]}`, `field "merges" must be a list of [left, right] id pairs`},
		{`{` + head + `"kind": "bpe", "vocab_size": 257, "split": "forge-v1", "merges": [[1, 2.5]]}`, `field "merges" must be a list of [left, right] id pairs`},
		{`{` + head + `"kind": "bpe", "vocab_size": 258, "split": "forge-v1", "merges": [[1, 2], [256, 400]]}`, "merge 1 (token 257) refers to token 400, which does not exist yet; a merge may only join earlier tokens (file corrupt?)"},
		{`{` + head + `"kind": "bpe", "vocab_size": 257, "split": "forge-v1", "merges": [[256, 1]]}`, "merge 0 (token 256) refers to token 256, which does not exist yet"},
		{`{` + head + `"kind": "bpe", "vocab_size": 257, "split": "forge-v1", "merges": [[-1, 1]]}`, "merge 0 (token 256) refers to token -1"},
		{`{` + head + `"kind": "bpe", "vocab_size": 258, "split": "forge-v1", "merges": [[1, 2], [1, 2]]}`, "merge 1 repeats merge 0, [1, 2] (file corrupt?)"},
		{`{` + head + `"kind": "bpe", "vocab_size": 266, "split": "forge-v1", "merges": [[1,1],[256,256],[257,257],[258,258],[259,259],[260,260],[261,261],[262,262],[263,263],[264,264]]}`,
			"merge 8 (token 264) makes a token of 512 bytes, longer than the 256 bytes a chunk can hold"},
		{`{` + head + `"kind": "char", "vocab_size": 258}`, `field "runes" is missing`},
		{`{` + head + `"kind": "char", "vocab_size": 259, "runes": "aba"}`, `rune 'a' (U+0061) appears twice in "runes", at 0 and 2; each may appear once (file corrupt?)`},
		{`{` + head + `"kind": "char", "vocab_size": 259, "runes": "ab"}`, "vocab_size is 259 but 256 byte tokens and 2 runes make 258 tokens"},
		{`{` + head + `"kind": "char", "vocab_size": 258, "runes": ["a", "b"]}`, `field "runes" must be a string`},
		{`{` + head + `"kind": "char", "vocab_size": 256, "runes": "", "merges": []}`, `field "merges" does not belong in a char tokenizer file`},
		{`{` + head + `"kind": "char", "vocab_size": 256, "runes": "", "split": "forge-v1"}`, `field "split" does not belong in a char tokenizer file`},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tok.json")
	for _, tc := range tests {
		if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil {
			t.Errorf("Load(%s) succeeded, want error %q", tc.doc, tc.want)
			continue
		}
		if prefix := "tokenizer: " + path + ": "; !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s):\n got error %q\nwant %q containing %q", tc.doc, err, prefix, tc.want)
		}
		_, err = Unmarshal([]byte(tc.doc))
		if err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Unmarshal(%s): error %v", tc.doc, err)
		}
	}

	_, err := Load(filepath.Join(dir, "absent.json"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "tokenizer: open ") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestLoadAccepts(t *testing.T) {
	// Hand-written files: any whitespace, merges null, runes in any order.
	docs := map[string]string{
		"bpe": `{"format":"forge-tokenizer","version":1,"kind":"bpe","vocab_size":256,"split":"forge-v1","merges":null}`,
		"char": `{"kind":"char","runes":"zay","vocab_size":259,"version":1,"format":"forge-tokenizer"}
`,
	}
	for kind, doc := range docs {
		tok, err := Unmarshal([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if tok.Kind() != kind {
			t.Errorf("kind %s, want %s", tok.Kind(), kind)
		}
	}
	tok, _ := Unmarshal([]byte(docs["char"]))
	if got, want := tok.Encode("yaz"), []int{258, 257, 256}; !slices.Equal(got, want) {
		t.Errorf("char ids follow the file's order: got %v, want %v", got, want)
	}
}

func TestDecodeOutOfRange(t *testing.T) {
	for name, tok := range map[string]interface {
		Tokenizer
		DecodeChecked([]int) (string, error)
	}{"bpe": sampleBPE(), "char": TrainChar("abc")} {
		v := tok.VocabSize()
		ids := append(tok.Encode("ok"), v, -1)
		if got := tok.Decode(ids); got != "ok\uFFFD\uFFFD" {
			t.Errorf("%s: Decode = %q", name, got)
		}
		_, err := tok.DecodeChecked(ids)
		want := fmt.Sprintf("tokenizer: decode: id %d at position 2 is outside the vocabulary 0..%d (2 of 4 ids are out of range)", v, v-1)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: DecodeChecked error %v, want %q", name, err, want)
		}
		if s, err := tok.DecodeChecked(tok.Encode("ok")); s != "ok" || err != nil {
			t.Errorf("%s: DecodeChecked of good ids: %q, %v", name, s, err)
		}
	}
}

func TestToken(t *testing.T) {
	tok, _ := TrainBPE(strings.Repeat(" the the\n\n", 10), 262, BPEOptions{})
	var shown []string
	for id := 256; id < tok.VocabSize(); id++ {
		shown = append(shown, tok.Token(id))
	}
	t.Logf("tokens: %q", shown)
	if !slices.Contains(shown, "␣the") || !slices.Contains(shown, `\n\n`) {
		t.Errorf("tokens %q lack ␣the or \\n\\n", shown)
	}
	for id, want := range map[int]string{'a': "a", ' ': "␣", '\t': `\t`, '\\': `\\`, 0: `\u{0}`, 0xff: `\xff`, 0x7f: `\u{7f}`, -3: "<bad id -3>", 9999: "<bad id 9999>"} {
		if got := tok.Token(id); got != want {
			t.Errorf("Token(%d) = %q, want %q", id, got, want)
		}
	}
	ch := TrainChar("aé🙂\u00a0")
	for id, want := range map[int]string{256: "a", 257: `\u{a0}`, 258: "é", 259: "🙂", 0xc3: `\xc3`, 260: "<bad id 260>"} {
		if got := ch.Token(id); got != want {
			t.Errorf("char Token(%d) = %q, want %q", id, got, want)
		}
	}
}

func TestChar(t *testing.T) {
	tok := TrainChar("hello, wörld\xff")
	if got, want := string(tok.Runes()), " ,dehlorwö"; got != want {
		t.Fatalf("runes %q, want %q", got, want)
	}
	if tok.VocabSize() != 256+10 || tok.Kind() != "char" {
		t.Fatalf("vocab %d kind %s", tok.VocabSize(), tok.Kind())
	}
	// Seen characters get their own id; "x" and "ü" were not seen and
	// "\xff" is no character, so they fall back to bytes.
	got := tok.Encode("wö xü\xff")
	want := []int{256 + 8, 256 + 9, 256, 'x', 0xc3, 0xbc, 0xff}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got); s != "wö xü\xff" {
		t.Errorf("Decode = %q", s)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := sampleBPE()
	fresh, _ := Unmarshal(tok.Marshal())
	texts := append([]string{sampleText}, trickyInputs...)
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for r := range 20 {
				i := (g + r) % len(texts)
				if got := fresh.Encode(texts[i]); !slices.Equal(got, want[i]) {
					t.Errorf("concurrent Encode(%q) differs", texts[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCacheBounded checks that the encoding cache stays within its limit
// and that a full cache starting over does not change results.
func TestCacheBounded(t *testing.T) {
	tok, _ := Unmarshal(sampleBPE().Marshal())
	b := tok.(*BPE)
	rng := rand.New(rand.NewPCG(7, 8))
	words := make([]string, cacheEntries+500)
	for i := range words {
		words[i] = fmt.Sprintf(" w%dx%d", i, rng.IntN(1000))
	}
	text := strings.Join(words, "")
	ids := b.Encode(text)
	if n := len(b.cache); n > cacheEntries {
		t.Errorf("cache holds %d entries, limit %d", n, cacheEntries)
	}
	if b.Decode(ids) != text || !slices.Equal(b.Encode(text), ids) {
		t.Error("encoding changed after the cache filled up")
	}
}

func BenchmarkTrainBPE4096Austen(b *testing.B) {
	text := austenText(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := TrainBPE(text, 4096, BPEOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAusten(b *testing.B) {
	text := austenText(b)
	tok, _ := austen4096(b)
	data := tok.Marshal()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		fresh, _ := Unmarshal(data) // cold cache each time
		b.StartTimer()
		fresh.Encode(text)
	}
}

func BenchmarkEncodeAustenWarm(b *testing.B) {
	text := austenText(b)
	tok, _ := austen4096(b)
	tok.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

func BenchmarkCharEncodeAusten(b *testing.B) {
	text := austenText(b)
	tok := TrainChar(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range trickyInputs {
		f.Add([]byte(s))
	}
	f.Add([]byte(sampleText))
	bpe := sampleBPE()
	ch := TrainChar(sampleText)
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		checkChunks(t, s)
		for _, tok := range []Tokenizer{bpe, ch} {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("%s: id %d out of range", tok.Kind(), id)
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Fatalf("%s: Decode(Encode(%q)) = %q", tok.Kind(), s, got)
			}
		}
		// The heap merge agrees with the scan on every chunk.
		for _, c := range chunksOf(s) {
			if a, b := bpe.mergeScan(c, nil), bpe.mergeHeap(c, nil); !slices.Equal(a, b) {
				t.Fatalf("chunk %q: scan %v, heap %v", c, a, b)
			}
		}
	})
}

func FuzzUnmarshal(f *testing.F) {
	small, _ := TrainBPE(sampleText, 300, BPEOptions{})
	f.Add(small.Marshal())
	f.Add(TrainChar("ab\x00é🙂").Marshal())
	f.Add([]byte(`{"format":"forge-tokenizer","version":1,"kind":"bpe","vocab_size":258,"split":"forge-v1","merges":[[97,97],[256,97]]}`))
	f.Add([]byte(`{"format":"forge-tokenizer","version":1,"kind":"char","vocab_size":259,"runes":"cba"}`))
	f.Add([]byte(`{"format":"forge-tokenizer","version":1,"kind":"bpe","vocab_size":257,"split":"forge-v1","merges":[[300,1]]}`))
	f.Add([]byte(`{"format":"forge-tokenizer","version":1,"kind":"char","vocab_size":258,"runes":"aa"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))
	inputs := []string{"", "aaab aaab", sampleText, "\xff\xfe\x00", "héllo 🙂 123456"}
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Unmarshal(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		for _, s := range inputs {
			ids := tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("id %d out of range 0..%d", id, tok.VocabSize()-1)
				}
			}
			if got := tok.Decode(ids); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
		}
		for id := range min(tok.VocabSize(), 2000) {
			tok.Token(id)
		}
		// What loads, saves back to a file that loads the same.
		var again []byte
		switch tok := tok.(type) {
		case *BPE:
			again = tok.Marshal()
		case *Char:
			again = tok.Marshal()
		}
		tok2, err := Unmarshal(again)
		if err != nil {
			t.Fatalf("re-reading a marshalled tokenizer: %v", err)
		}
		if !reflect.DeepEqual(tok2.Encode(sampleText), tok.Encode(sampleText)) {
			t.Fatal("the re-read tokenizer encodes differently")
		}
	})
}
