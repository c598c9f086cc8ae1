package tokenizer

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// BPE is a byte-level byte-pair-encoding tokenizer. Tokens 0..255 are the
// byte values; merge i (counting from 0) joins two earlier tokens into
// token 256+i. Its methods are safe for concurrent use.
type BPE struct {
	merges [][2]int32       // merges[i] = the pair joined into token 256+i
	ranks  map[uint64]int32 // pairKey(a, b) -> i for merges[i] = {a, b}
	vocab  []string         // the bytes of every token

	cacheMu sync.RWMutex
	cache   map[string][]int32 // chunk -> its token ids
}

var (
	_ Tokenizer = (*BPE)(nil)
	_ Tokenizer = (*Char)(nil)
)

// Encoding caches the ids of up to cacheEntries distinct chunks of up to
// cacheChunkBytes bytes each; when the cache is full it starts over.
const (
	cacheEntries    = 1 << 16
	cacheChunkBytes = 64
)

// smallChunk is the length up to which a chunk is merged by repeated
// scanning; longer chunks use a heap, which keeps the cost near n log n.
const smallChunk = 32

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func unpairKey(k uint64) (a, b int32) { return int32(k >> 32), int32(uint32(k)) }

// newBPE builds a tokenizer from merges that are already known to be valid
// (see checkMerges).
func newBPE(merges [][2]int32) *BPE {
	t := &BPE{
		merges: merges,
		ranks:  make(map[uint64]int32, len(merges)),
		vocab:  make([]string, 256, 256+len(merges)),
		cache:  make(map[string][]int32),
	}
	for b := range 256 {
		t.vocab[b] = string([]byte{byte(b)})
	}
	for i, m := range merges {
		t.ranks[pairKey(m[0], m[1])] = int32(i)
		t.vocab = append(t.vocab, t.vocab[m[0]]+t.vocab[m[1]])
	}
	return t
}

// Kind returns "bpe".
func (t *BPE) Kind() string { return "bpe" }

// VocabSize returns 256 plus the number of merges.
func (t *BPE) VocabSize() int { return len(t.vocab) }

// Merges returns a copy of the merge list: element i holds the two tokens
// joined into token 256+i.
func (t *BPE) Merges() [][2]int {
	out := make([][2]int, len(t.merges))
	for i, m := range t.merges {
		out[i] = [2]int{int(m[0]), int(m[1])}
	}
	return out
}

// TokenBytes returns the bytes token id stands for, or nil if id is not
// in 0..VocabSize()-1.
func (t *BPE) TokenBytes(id int) []byte {
	if uint(id) >= uint(len(t.vocab)) {
		return nil
	}
	return []byte(t.vocab[id])
}

// Token returns a printable form of token id (see the package comment).
func (t *BPE) Token(id int) string {
	if uint(id) >= uint(len(t.vocab)) {
		return badToken(id)
	}
	return display(t.vocab[id])
}

// Encode splits text into chunks and applies the merges inside each chunk,
// lowest merge first. It accepts any string, including invalid UTF-8.
func (t *BPE) Encode(text string) []int {
	out := make([]int, 0, len(text)/4+1)
	var scratch []int32
	for len(text) > 0 {
		n := nextChunk(text)
		chunk := text[:n]
		text = text[n:]
		if n == 1 {
			out = append(out, int(chunk[0]))
			continue
		}
		if n <= cacheChunkBytes {
			t.cacheMu.RLock()
			ids, ok := t.cache[chunk]
			t.cacheMu.RUnlock()
			if ok {
				out = appendIDs(out, ids)
				continue
			}
		}
		scratch = t.encodeChunk(chunk, scratch[:0])
		out = appendIDs(out, scratch)
		if n <= cacheChunkBytes {
			ids := append([]int32(nil), scratch...)
			key := strings.Clone(chunk) // do not keep the caller's text alive
			t.cacheMu.Lock()
			if len(t.cache) >= cacheEntries {
				clear(t.cache)
			}
			t.cache[key] = ids
			t.cacheMu.Unlock()
		}
	}
	return out
}

func appendIDs(out []int, ids []int32) []int {
	for _, id := range ids {
		out = append(out, int(id))
	}
	return out
}

// encodeChunk appends the ids of one chunk to syms and returns the result.
func (t *BPE) encodeChunk(chunk string, syms []int32) []int32 {
	if len(chunk) <= smallChunk {
		return t.mergeScan(chunk, syms)
	}
	return t.mergeHeap(chunk, syms)
}

// mergeScan applies the merges to chunk by repeatedly finding the
// lowest-ranked adjacent pair and joining all its occurrences, left to
// right. It takes time quadratic in the chunk length.
func (t *BPE) mergeScan(chunk string, syms []int32) []int32 {
	base := len(syms)
	for i := 0; i < len(chunk); i++ {
		syms = append(syms, int32(chunk[i]))
	}
	s := syms[base:]
	for len(s) > 1 {
		best, at := int32(-1), -1
		for i := 0; i+1 < len(s); i++ {
			if r, ok := t.ranks[pairKey(s[i], s[i+1])]; ok && (at < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		a, b, id := t.merges[best][0], t.merges[best][1], 256+best
		j := at
		for i := at; i < len(s); j++ {
			if i+1 < len(s) && s[i] == a && s[i+1] == b {
				s[j] = id
				i += 2
			} else {
				s[j] = s[i]
				i++
			}
		}
		s = s[:j]
	}
	return syms[:base+len(s)]
}

// mergeHeap gives the same result as mergeScan in O(n log n): the symbols
// form a linked list, and a min-heap holds candidate merges keyed by
// (rank, position), so equal merges happen left to right. Entries that
// went stale when a neighbour changed are skipped when popped.
func (t *BPE) mergeHeap(chunk string, out []int32) []int32 {
	n := len(chunk)
	sym := make([]int32, n)
	next := make([]int32, n) // -1 at the end
	prev := make([]int32, n) // -1 at the start
	for i := range n {
		sym[i] = int32(chunk[i])
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	next[n-1] = -1
	var h minHeap
	push := func(i int32) {
		if i < 0 || next[i] < 0 {
			return
		}
		if r, ok := t.ranks[pairKey(sym[i], sym[next[i]])]; ok {
			h.push(uint64(r)<<32 | uint64(i))
		}
	}
	for i := range n - 1 {
		push(int32(i))
	}
	for len(h) > 0 {
		e := h.pop()
		r, i := int32(e>>32), int32(uint32(e))
		j := next[i]
		if sym[i] < 0 || j < 0 || t.merges[r] != [2]int32{sym[i], sym[j]} {
			continue // stale
		}
		sym[i] = 256 + r
		sym[j] = -1 // removed
		next[i] = next[j]
		if k := next[j]; k >= 0 {
			prev[k] = i
		}
		push(prev[i])
		push(i)
	}
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, sym[i])
	}
	return out
}

// minHeap is a binary min-heap of uint64 keys.
type minHeap []uint64

func (h *minHeap) push(x uint64) {
	s := append(*h, x)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p] <= x {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = x
	*h = s
}

func (h *minHeap) pop() uint64 {
	s := *h
	top := s[0]
	last := s[len(s)-1]
	s = s[:len(s)-1]
	i := 0
	for {
		c := 2*i + 1
		if c >= len(s) {
			break
		}
		if c+1 < len(s) && s[c+1] < s[c] {
			c++
		}
		if last <= s[c] {
			break
		}
		s[i] = s[c]
		i = c
	}
	if len(s) > 0 {
		s[i] = last
	}
	*h = s
	return top
}

// Decode concatenates the bytes of the tokens. An id outside
// 0..VocabSize()-1 is written as U+FFFD (the replacement character); use
// DecodeChecked to have such ids reported instead.
func (t *BPE) Decode(ids []int) string {
	var b strings.Builder
	b.Grow(len(ids) * 4)
	for _, id := range ids {
		if uint(id) < uint(len(t.vocab)) {
			b.WriteString(t.vocab[id])
		} else {
			b.WriteString(replacement)
		}
	}
	return b.String()
}

// DecodeChecked is Decode but returns an error naming the first id outside
// 0..VocabSize()-1, if any.
func (t *BPE) DecodeChecked(ids []int) (string, error) {
	if err := checkIDs(ids, len(t.vocab)); err != nil {
		return "", err
	}
	return t.Decode(ids), nil
}

const replacement = string(utf8.RuneError)

func checkIDs(ids []int, vocab int) error {
	for i, id := range ids {
		if uint(id) >= uint(vocab) {
			bad := 0
			for _, id := range ids[i:] {
				if uint(id) >= uint(vocab) {
					bad++
				}
			}
			return fmt.Errorf("tokenizer: decode: id %d at position %d is outside the vocabulary 0..%d (%d of %d ids are out of range); were the ids made by a different tokenizer?",
				id, i, vocab-1, bad, len(ids))
		}
	}
	return nil
}

// Marshal returns the tokenizer file's contents, as Save writes them: one
// merge per line.
func (t *BPE) Marshal() []byte {
	var b bytes.Buffer
	b.Grow(128 + 14*len(t.merges))
	marshalHeader(&b, "bpe", t.VocabSize())
	fmt.Fprintf(&b, "  \"split\": %q,\n  \"merges\": [", splitRule)
	for i, m := range t.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    [%d, %d]", m[0], m[1])
	}
	if len(t.merges) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("]\n}\n")
	return b.Bytes()
}

// Save writes the tokenizer to path atomically: to a temporary file in the
// same directory, flushed to disk, then renamed over path.
func (t *BPE) Save(path string) error { return writeFileAtomic(path, t.Marshal()) }
