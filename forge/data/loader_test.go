package data

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// positionFile writes a token file whose token i is i, so every window
// reveals where it starts.
func positionFile(t *testing.T, n int) string {
	t.Helper()
	if n > MaxVocab {
		t.Fatalf("positionFile: n %d too large", n)
	}
	tokens := make([]uint16, n)
	for i := range tokens {
		tokens[i] = uint16(i)
	}
	path := filepath.Join(t.TempDir(), "pos.bin")
	if err := WriteTokens(path, tokens); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string, batch, context int, seed uint64) *Loader {
	t.Helper()
	l, err := OpenLoader(path, batch, context, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func draw(l *Loader, batches int) [][]int32 {
	var out [][]int32
	for range batches {
		x, y := l.Next()
		out = append(out, x, y)
	}
	return out
}

func TestRNGGolden(t *testing.T) {
	// xoshiro256** from the state {1, 2, 3, 4}: the reference outputs.
	s := RNGState{1, 2, 3, 4}
	for _, want := range []uint64{11520, 0, 1509978240, 1215971899390074240} {
		if got := s.next(); got != want {
			t.Fatalf("xoshiro256** = %d, want %d", got, want)
		}
	}
	// The seeding this package uses.
	s = newRNG(42)
	for _, want := range []uint64{0x15780b2e0c2ec716, 0x6104d9866d113a7e, 0xae17533239e499a1, 0xecb8ad4703b360a1} {
		if got := s.next(); got != want {
			t.Fatalf("seed 42: %#x, want %#x", got, want)
		}
	}
}

func TestRNGBelowUniform(t *testing.T) {
	s := newRNG(7)
	const n, draws = 10, 100_000
	var counts [n]int
	for range draws {
		v := s.below(n)
		if v >= n {
			t.Fatalf("below(%d) = %d", n, v)
		}
		counts[v]++
	}
	for v, c := range counts {
		if c < draws/n*9/10 || c > draws/n*11/10 {
			t.Errorf("value %d drawn %d times of %d; far from uniform", v, c, draws)
		}
	}
	if s.below(1) != 0 {
		t.Error("below(1) != 0")
	}
}

func TestLoaderWindows(t *testing.T) {
	const n, batch, context = 5000, 8, 64
	l := open(t, positionFile(t, n), batch, context, 1)
	if l.Tokens() != n || l.Batch() != batch || l.Context() != context {
		t.Fatalf("Tokens, Batch, Context = %d, %d, %d", l.Tokens(), l.Batch(), l.Context())
	}
	for range 200 {
		x, y := l.Next()
		if len(x) != batch*context || len(y) != batch*context {
			t.Fatalf("len(x), len(y) = %d, %d; want %d", len(x), len(y), batch*context)
		}
		for b := range batch {
			pos := int(x[b*context])
			if pos < 0 || pos > n-context-1 {
				t.Fatalf("window at %d, outside [0, %d]", pos, n-context-1)
			}
			for i := range context {
				if x[b*context+i] != int32(pos+i) || y[b*context+i] != int32(pos+i+1) {
					t.Fatalf("window %d at %d: x[%d] = %d, y[%d] = %d; want consecutive tokens with y = x shifted by one",
						b, pos, i, x[b*context+i], i, y[b*context+i])
				}
			}
		}
	}
	if l.Batches() != 200 {
		t.Errorf("Batches() = %d, want 200", l.Batches())
	}
}

func TestLoaderReachesBothEnds(t *testing.T) {
	// n = context+3: exactly three start positions, 0, 1 and 2.
	const context = 16
	l := open(t, positionFile(t, context+3), 4, context, 3)
	seen := map[int32]int{}
	for range 100 {
		x, _ := l.Next()
		for b := range 4 {
			seen[x[b*context]]++
		}
	}
	if len(seen) != 3 || seen[0] == 0 || seen[2] == 0 {
		t.Errorf("start positions drawn: %v; want each of 0, 1, 2", seen)
	}
	// The smallest file a context accepts: one window, always at 0.
	one := open(t, positionFile(t, context+1), 2, context, 3)
	x, y := one.Next()
	if x[0] != 0 || x[context] != 0 || y[context-1] != context {
		t.Errorf("single-window file: x[0] = %d, y[last] = %d", x[0], y[context-1])
	}
}

func TestLoaderDeterminism(t *testing.T) {
	path := positionFile(t, 3000)
	a := draw(open(t, path, 4, 32, 1337), 20)
	b := draw(open(t, path, 4, 32, 1337), 20)
	c := draw(open(t, path, 4, 32, 1338), 20)
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Error("the same seed gave different batches")
	}
	if slices.EqualFunc(a, c, slices.Equal) {
		t.Error("different seeds gave the same batches")
	}
	// Pinned first windows for seed 1337, so the sequence cannot change
	// silently across platforms or releases.
	l := open(t, path, 4, 32, 1337)
	x, _ := l.Next()
	starts := []int32{x[0], x[32], x[64], x[96]}
	if want := goldenStarts; !slices.Equal(starts, want) {
		t.Errorf("seed 1337 first batch starts at %v, want %v", starts, want)
	}
}

// goldenStarts was computed by an independent Python implementation of
// SplitMix64 seeding, xoshiro256** and Lemire's bounded draw.
var goldenStarts = []int32{2006, 2417, 2307, 2762}

func TestLoaderStateResume(t *testing.T) {
	path := positionFile(t, 4000)
	full := open(t, path, 3, 50, 99)
	draw(full, 7)
	saved := full.State()
	rest := draw(full, 10)

	js, err := json.Marshal(saved)
	if err != nil {
		t.Fatal(err)
	}
	var back LoaderState
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back != saved {
		t.Fatalf("JSON round trip changed the state: %+v → %s → %+v", saved, js, back)
	}
	if !strings.Contains(string(js), `"seed":"99"`) || !strings.Contains(string(js), `"batches":7`) {
		t.Errorf("state JSON %s", js)
	}

	// A new loader with another seed, restored, continues the sequence.
	resumed := open(t, path, 3, 50, 12345)
	if err := resumed.SetState(back); err != nil {
		t.Fatal(err)
	}
	if resumed.Batches() != 7 {
		t.Errorf("Batches() after SetState = %d, want 7", resumed.Batches())
	}
	if got := draw(resumed, 10); !slices.EqualFunc(got, rest, slices.Equal) {
		t.Error("the resumed loader's batches differ from the uninterrupted run's")
	}
	if resumed.State() != full.State() {
		t.Errorf("states differ after the same batches: %+v vs %+v", resumed.State(), full.State())
	}
}

func TestLoaderSetStateRefuses(t *testing.T) {
	l := open(t, positionFile(t, 4000), 3, 50, 1)
	good := l.State()
	other := open(t, positionFile(t, 3999), 3, 50, 1)
	if err := other.SetState(good); err == nil || !strings.Contains(err.Error(), "4000 tokens, this one has 3999") {
		t.Errorf("SetState for another file: %v", err)
	}
	shape := open(t, positionFile(t, 4000), 4, 50, 1)
	if err := shape.SetState(good); err == nil || !strings.Contains(err.Error(), "batch 3, context 50") {
		t.Errorf("SetState for another batch size: %v", err)
	}
	zero := good
	zero.RNG = RNGState{}
	if err := l.SetState(zero); err == nil || !strings.Contains(err.Error(), "all-zero") {
		t.Errorf("SetState with a zero generator: %v", err)
	}
	if l.State() != good {
		t.Error("a refused SetState changed the loader")
	}
	var s LoaderState
	if err := json.Unmarshal([]byte(`{"rng":[1,2,3,4]}`), &s); err == nil {
		t.Error("numeric rng words were accepted")
	}
	if err := json.Unmarshal([]byte(`{"rng":["1","2","3"]}`), &s); err == nil {
		t.Error("three rng words were accepted")
	}
}

func TestLoaderEval(t *testing.T) {
	const n, batch, context = 1000, 4, 30 // 33 windows: 8 full batches and one of 1
	l := open(t, positionFile(t, n), batch, context, 5)
	if got := l.EvalWindows(); got != (n-1)/context {
		t.Fatalf("EvalWindows() = %d, want %d", got, (n-1)/context)
	}
	before := l.State()
	batches := l.EvalBatches(0)
	if len(batches) != 9 {
		t.Fatalf("%d eval batches, want 9", len(batches))
	}
	w := 0
	for bi, xy := range batches {
		x, y := xy[0], xy[1]
		k := len(x) / context
		if wantK := min(batch, 33-bi*batch); k != wantK || len(y) != len(x) {
			t.Fatalf("batch %d holds %d windows (len y %d), want %d", bi, k, len(y), wantK)
		}
		for j := range k {
			for i := range context {
				if x[j*context+i] != int32(w*context+i) || y[j*context+i] != int32(w*context+i+1) {
					t.Fatalf("eval window %d is not tokens [%d, %d) and their successors", w, w*context, (w+1)*context)
				}
			}
			w++
		}
	}
	if again := l.EvalBatches(0); !slices.EqualFunc(again, batches, func(a, b [2][]int32) bool {
		return slices.Equal(a[0], b[0]) && slices.Equal(a[1], b[1])
	}) {
		t.Error("a second Eval walk differs")
	}
	if got := len(l.EvalBatches(3)); got != 3 {
		t.Errorf("EvalBatches(3) gave %d batches", got)
	}
	for range l.Eval(0) {
		break // stopping early must be fine
	}
	if l.State() != before {
		t.Error("Eval moved the random sequence")
	}
}

func TestOpenLoaderErrors(t *testing.T) {
	dir := t.TempDir()
	small := positionFile(t, 100)
	_, err := OpenLoader(small, 2, 100, 1)
	if err == nil {
		t.Fatal("OpenLoader accepted 100 tokens for context 100")
	}
	for _, w := range []string{small, "100 tokens", "context 100", "at least 101", "smaller context"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if l, err := OpenLoader(small, 2, 99, 1); err != nil {
		t.Errorf("OpenLoader refused 100 tokens for context 99: %v", err)
	} else {
		l.Close()
	}

	bad := filepath.Join(dir, "bad.bin")
	os.WriteFile(bad, []byte("Call me Ishmael. Some years ago, never mind how long"), 0o644)
	_, err = OpenLoader(bad, 1, 8, 1)
	if !errors.Is(err, ErrNotTokenFile) || !strings.Contains(err.Error(), bad) {
		t.Errorf("OpenLoader(text file) = %v", err)
	}
	empty := filepath.Join(dir, "empty.bin")
	os.WriteFile(empty, nil, 0o644)
	if _, err = OpenLoader(empty, 1, 8, 1); !errors.Is(err, ErrHeader) {
		t.Errorf("OpenLoader(empty file) = %v", err)
	}
	trunc := filepath.Join(dir, "trunc.bin")
	os.WriteFile(trunc, tokenFile(TokenMagic, 1, 1000, 1, 2, 3), 0o644)
	if _, err = OpenLoader(trunc, 1, 2, 1); !errors.Is(err, ErrSize) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("OpenLoader(truncated file) = %v", err)
	}
	if _, err = OpenLoader(filepath.Join(dir, "missing.bin"), 1, 8, 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenLoader(missing file) = %v", err)
	}
	if _, err = OpenLoader(small, 0, 8, 1); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("OpenLoader(batch 0) = %v", err)
	}
}

func TestLoaderClose(t *testing.T) {
	path := positionFile(t, 500)
	l, err := OpenLoader(path, 2, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	if maps, ok := procMaps(t); ok && mapped && !strings.Contains(maps, path) {
		t.Error("the open loader's file is not in the process's mappings")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if maps, ok := procMaps(t); ok && mapped && strings.Contains(maps, path) {
		t.Error("the file is still mapped after Close")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if l.Tokens() != 500 {
		t.Errorf("Tokens() after Close = %d", l.Tokens())
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "after Close") {
			t.Errorf("Next after Close: recovered %v", r)
		}
	}()
	l.Next()
}

func TestNextIntoChecksLengths(t *testing.T) {
	l := open(t, positionFile(t, 500), 2, 10, 1)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "need 2×10 = 20 values") {
			t.Errorf("NextInto with short slices: recovered %v", r)
		}
	}()
	l.NextInto(make([]int32, 20), make([]int32, 19))
}
