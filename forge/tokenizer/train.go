package tokenizer

import (
	"fmt"
	"slices"
)

// BPEOptions adjusts TrainBPE. The zero value is ready to use.
type BPEOptions struct {
	// Progress, if not nil, is called on TrainBPE's goroutine as merges
	// are learned, at most about 100 times, with the number of merges
	// made and the number wanted (vocabSize-256). The last call has
	// done == total unless the text ran out of pairs to merge.
	Progress func(done, total int)
}

// TrainBPE learns vocabSize-256 merges from text. The text is split into
// chunks (see the package comment), identical chunks are counted once with
// their frequency, and each step merges the adjacent pair of tokens that
// occurs most often inside chunks; ties go to the pair with the smaller
// left id, then the smaller right id, so the result depends only on the
// text and vocabSize.
//
// If every chunk becomes a single token before vocabSize is reached,
// training stops early and the returned tokenizer's VocabSize is smaller
// than asked; use VocabSize, not the requested size, to size a model.
// TrainBPE returns an error only if vocabSize is outside
// 256..MaxVocabSize.
func TrainBPE(text string, vocabSize int, opts BPEOptions) (*BPE, error) {
	if vocabSize < 256 || vocabSize > MaxVocabSize {
		return nil, fmt.Errorf("tokenizer: TrainBPE: vocabSize %d is out of range: it must be between 256 (the byte tokens) and %d",
			vocabSize, MaxVocabSize)
	}
	tr := newTrainer(text)
	merges := tr.run(vocabSize-256, opts.Progress)
	return newBPE(merges), nil
}

// trainer holds the incremental state of BPE training. Each distinct
// chunk is a word: a sequence of token ids with a frequency. counts holds
// the weighted number of occurrences of every adjacent pair inside words,
// where lists (a superset of) the words containing each pair, and queue is
// a lazy max-heap of (count, pair) whose stale entries are dropped when
// they surface.
type trainer struct {
	words  [][]int32
	freq   []int64
	counts map[uint64]int64
	where  map[uint64][]int32
	queue  pairHeap

	changed map[uint64]struct{} // pairs whose count changed in this step
}

func newTrainer(text string) *trainer {
	chunkCount := make(map[string]int64)
	for s := text; len(s) > 0; {
		n := nextChunk(s)
		if n > 1 { // a one-byte chunk has no pairs
			chunkCount[s[:n]]++
		}
		s = s[n:]
	}
	// Word ids in sorted chunk order keep every run identical step by
	// step, not only in its result.
	chunks := make([]string, 0, len(chunkCount))
	for c := range chunkCount {
		chunks = append(chunks, c)
	}
	slices.Sort(chunks)

	tr := &trainer{
		words:   make([][]int32, len(chunks)),
		freq:    make([]int64, len(chunks)),
		counts:  make(map[uint64]int64),
		where:   make(map[uint64][]int32),
		changed: make(map[uint64]struct{}),
	}
	for wi, c := range chunks {
		w := make([]int32, len(c))
		for i := 0; i < len(c); i++ {
			w[i] = int32(c[i])
		}
		tr.words[wi] = w
		f := chunkCount[c]
		tr.freq[wi] = f
		for i := 0; i+1 < len(w); i++ {
			p := pairKey(w[i], w[i+1])
			tr.counts[p] += f
			tr.note(p, int32(wi))
		}
	}
	tr.queue = make(pairHeap, 0, len(tr.counts))
	for p, c := range tr.counts {
		tr.queue = append(tr.queue, pairCount{c, p})
	}
	tr.queue.init()
	return tr
}

// note records that word wi contains pair p. Words are scanned one at a
// time, so checking the last entry is enough to avoid duplicates.
func (tr *trainer) note(p uint64, wi int32) {
	ws := tr.where[p]
	if len(ws) == 0 || ws[len(ws)-1] != wi {
		tr.where[p] = append(ws, wi)
	}
}

func (tr *trainer) add(p uint64, delta int64) {
	tr.counts[p] += delta
	tr.changed[p] = struct{}{}
}

// best pops the most frequent pair, skipping stale heap entries.
func (tr *trainer) best() (uint64, bool) {
	for len(tr.queue) > 0 {
		e := tr.queue.pop()
		if c, ok := tr.counts[e.pair]; ok && c == e.count {
			return e.pair, true
		}
	}
	return 0, false
}

func (tr *trainer) run(total int, progress func(done, total int)) [][2]int32 {
	merges := make([][2]int32, 0, total)
	step := max(1, (total+99)/100) // at most 100 calls, plus a last one
	reported := -1
	for len(merges) < total {
		p, ok := tr.best()
		if !ok {
			break // every word is a single token
		}
		a, b := unpairKey(p)
		id := int32(256 + len(merges))
		merges = append(merges, [2]int32{a, b})
		tr.merge(p, a, b, id)
		if done := len(merges); progress != nil && (done%step == 0 || done == total) {
			progress(done, total)
			reported = done
		}
	}
	if progress != nil && reported != len(merges) {
		progress(len(merges), total)
	}
	return merges
}

// merge replaces pair (a, b) by id in every word containing it and
// updates the pair counts, the index and the heap for those words only.
func (tr *trainer) merge(p uint64, a, b, id int32) {
	ws := tr.where[p]
	delete(tr.where, p)
	for _, wi := range ws {
		w := tr.words[wi]
		first := -1
		for i := 0; i+1 < len(w); i++ {
			if w[i] == a && w[i+1] == b {
				first = i
				break
			}
		}
		if first < 0 {
			continue // the pair left this word in an earlier merge
		}
		// Rewrite the word in place, w[:j] being the new word so far.
		// At each occurrence the pair itself and its links to the
		// neighbours are replaced; the left neighbour is read from the
		// new word, so that two adjacent occurrences ("abab") first
		// count (c, a) and then take it back for (c, c).
		f := tr.freq[wi]
		j := first
		for i := first; i < len(w); j++ {
			if i+1 < len(w) && w[i] == a && w[i+1] == b {
				tr.add(p, -f)
				if j > 0 {
					x := w[j-1]
					tr.add(pairKey(x, a), -f)
					q := pairKey(x, id)
					tr.add(q, f)
					tr.note(q, wi)
				}
				if i+2 < len(w) {
					y := w[i+2]
					tr.add(pairKey(b, y), -f)
					q := pairKey(id, y)
					tr.add(q, f)
					tr.note(q, wi)
				}
				w[j] = id
				i += 2
			} else {
				w[j] = w[i]
				i++
			}
		}
		tr.words[wi] = w[:j]
	}
	for q := range tr.changed {
		if c := tr.counts[q]; c > 0 {
			tr.queue.push(pairCount{c, q})
		} else {
			// A pair of existing tokens that vanished never comes back:
			// new pairs always involve the newest token.
			delete(tr.counts, q)
			delete(tr.where, q)
		}
	}
	clear(tr.changed)
}

// pairCount is a heap entry: a pair and its count when it was pushed.
type pairCount struct {
	count int64
	pair  uint64
}

// before orders entries: higher count first, then the smaller pair (the
// pair key orders by left id, then right id).
func (x pairCount) before(y pairCount) bool {
	if x.count != y.count {
		return x.count > y.count
	}
	return x.pair < y.pair
}

// pairHeap is a binary heap of pairCount with the best entry on top.
type pairHeap []pairCount

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(x pairCount) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !x.before(s[p]) {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = x
}

func (h *pairHeap) pop() pairCount {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	*h = s[:n]
	h.down(0)
	return top
}

func (h pairHeap) down(i int) {
	n := len(h)
	if i >= n {
		return
	}
	x := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].before(h[c]) {
			c++
		}
		if !h[c].before(x) {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = x
}
