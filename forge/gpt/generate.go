package gpt

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/nn"
)

// Sampling chooses the next token from the model's logits.
type Sampling struct {
	Temperature float64 // 0 = greedy (argmax); 1 = the model's distribution
	TopK        int     // keep the k most likely tokens (0 = all)
	TopP        float64 // keep the smallest set whose probability reaches p (0 or 1 = all)
}

// GenerateOptions configure Generate.
type GenerateOptions struct {
	MaxTokens int // tokens to generate (after the prompt)
	Sampling
	Gen        *forge.Generator     // draws samples; nil = a generator seeded with Seed
	Seed       uint64               // seed when Gen is nil
	StopTokens []int                // stop after producing any of these (it is included)
	Stop       func(out []int) bool // stop when it returns true, given the tokens so far
	OnToken    func(id int) bool    // called with each token as it is produced; false stops
	NoCache    bool                 // recompute the whole window for every token (a reference)
}

// ErrEmptyPrompt is returned by Generate for a prompt with no tokens.
var ErrEmptyPrompt = errors.New("gpt: generate: the prompt has no tokens; give at least one")

// Generate continues prompt by up to opts.MaxTokens tokens and returns the
// new tokens. Dropout is off while it runs and no graph is recorded.
//
// The model sees at most Context tokens: once the text is longer, the
// window restarts at a multiple of Context/2, so with the KV cache only one
// token in Context/2 pays for a full forward pass. The cached and uncached
// paths see the same windows and give the same tokens.
func (m *Model) Generate(prompt []int, opts GenerateOptions) (out []int, err error) {
	if len(prompt) == 0 {
		return nil, ErrEmptyPrompt
	}
	for i, id := range prompt {
		if id < 0 || id >= m.Config.Vocab {
			return nil, fmt.Errorf("gpt: generate: prompt token %d (at %d) is outside the vocabulary 0..%d", id, i, m.Config.Vocab-1)
		}
	}
	if err := opts.Sampling.check(); err != nil {
		return nil, err
	}
	gen := opts.Gen
	if gen == nil {
		gen = forge.NewGenerator(opts.Seed)
	}
	wasTraining := m.training
	m.SetTraining(false)
	defer m.SetTraining(wasTraining)
	defer m.freezeWeights()()

	seq := slices.Clone(prompt)
	var cache *Cache
	cacheStart := -1
	err = forge.Try(func() {
		forge.NoGrad(func() {
			for len(out) < opts.MaxTokens {
				n := len(seq)
				s := windowStart(n, m.Config.Context)
				var logits *forge.Tensor
				switch {
				case opts.NoCache:
					logits = m.Forward(idsTensor(seq[s:n]), nil)
				case s != cacheStart:
					if cache == nil {
						cache = m.NewCache(1)
					}
					for _, l := range cache.Layers {
						l.Len = 0
					}
					cacheStart = s
					logits = m.Forward(idsTensor(seq[s:n]), cache)
				default:
					logits = m.Forward(idsTensor(seq[cacheStart+cache.Len():n]), cache)
				}
				t := logits.Size(1)
				row := logits.Narrow(1, t-1, 1).Narrow(2, 0, m.Config.Vocab).Float32s()
				id := opts.Sampling.Sample(row, gen)
				seq = append(seq, id)
				out = append(out, id)
				if opts.OnToken != nil && !opts.OnToken(id) {
					return
				}
				if slices.Contains(opts.StopTokens, id) || (opts.Stop != nil && opts.Stop(out)) {
					return
				}
			}
		})
	})
	return out, err
}

// freezeWeights replaces, until the returned function undoes it, each
// quantised or masked Linear's weight with the weight it computes with
// (nn.Linear.EffectiveWeight, computed once), so that generation does not
// fake-quantise every weight again for every token. The values reaching
// the matmuls are the same, and so are the logits.
func (m *Model) freezeWeights() (restore func()) {
	type saved struct {
		l     *nn.Linear
		w, mk *forge.Tensor
		quant string
	}
	var ss []saved
	forge.NoGrad(func() {
		for _, nl := range m.Linears() {
			l := nl.Layer
			if l.Mask == nil && (l.Quant == "" || l.Quant == forge.QuantNone) {
				continue
			}
			ss = append(ss, saved{l, l.Weight, l.Mask, l.Quant})
			l.Weight, l.Mask, l.Quant = l.EffectiveWeight(), nil, ""
		}
	})
	return func() {
		for _, s := range ss {
			s.l.Weight, s.l.Mask, s.l.Quant = s.w, s.mk, s.quant
		}
	}
}

// windowStart is where the window that predicts token n begins: 0 while n
// fits the context, then the smallest multiple of context/2 that leaves at
// most context tokens.
func windowStart(n, context int) int {
	if n <= context {
		return 0
	}
	h := max(1, context/2)
	return (n - context + h - 1) / h * h
}

func idsTensor(ids []int) *forge.Tensor {
	v := make([]int32, len(ids))
	for i, id := range ids {
		v[i] = int32(id)
	}
	return forge.FromSlice(v, 1, len(v))
}

func (s Sampling) check() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature):
		return fmt.Errorf("gpt: generate: temperature %g: want >= 0 (0 is greedy)", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("gpt: generate: top-k %d: want >= 0 (0 keeps all)", s.TopK)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("gpt: generate: top-p %g: want 0..1 (0 or 1 keeps all)", s.TopP)
	}
	return nil
}

// Sample draws one index from logits: the argmax at temperature 0 (the
// lowest index among ties), else a draw from softmax(logits/temperature)
// restricted by top-k, then top-p. NaN logits are never chosen.
func (s Sampling) Sample(logits []float32, gen *forge.Generator) int {
	if s.Temperature == 0 || s.TopK == 1 {
		best := -1
		for i, v := range logits {
			if !math.IsNaN(float64(v)) && (best < 0 || v > logits[best]) {
				best = i
			}
		}
		return max(best, 0)
	}
	type cand struct {
		id int
		p  float64
	}
	cs := make([]cand, 0, len(logits))
	for i, v := range logits {
		if !math.IsNaN(float64(v)) {
			cs = append(cs, cand{i, float64(v) / s.Temperature})
		}
	}
	if len(cs) == 0 {
		return 0
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].p > cs[b].p })
	if s.TopK > 0 && s.TopK < len(cs) {
		cs = cs[:s.TopK]
	}
	top, sum := cs[0].p, 0.0
	for i := range cs {
		cs[i].p = math.Exp(cs[i].p - top)
		sum += cs[i].p
	}
	if s.TopP > 0 && s.TopP < 1 {
		acc := 0.0
		for i := range cs {
			acc += cs[i].p / sum
			if acc >= s.TopP {
				cs = cs[:i+1]
				break
			}
		}
		sum = 0
		for _, c := range cs {
			sum += c.p
		}
	}
	r := gen.Float64() * sum
	for _, c := range cs {
		r -= c.p
		if r < 0 {
			return c.id
		}
	}
	return cs[len(cs)-1].id
}
