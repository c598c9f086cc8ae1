package dataset

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

//go:embed presets.json
var presetsJSON []byte

type presetSource struct {
	Repo    string `json:"repo"`
	Config  string `json:"config"`
	Split   string `json:"split"`
	Field   string `json:"field"`
	Licence string `json:"licence"`
}

type presetTable struct {
	Sources  map[string]presetSource       `json:"sources"`
	Mixtures map[string]map[string]float64 `json:"mixtures"`
}

var presets = func() presetTable {
	var t presetTable
	if err := json.Unmarshal(presetsJSON, &t); err != nil {
		panic("dataset: presets.json: " + err.Error())
	}
	return t
}()

// Presets lists the named sources and mixtures --mix accepts.
func Presets() (sources, mixtures []string) {
	for k := range presets.Sources {
		sources = append(sources, k)
	}
	for k := range presets.Mixtures {
		mixtures = append(mixtures, k)
	}
	sort.Strings(sources)
	sort.Strings(mixtures)
	return sources, mixtures
}

// ParseMix reads --mix name:weight,name:weight,… of presets (a mixture
// preset expands into its sources, its weights scaled by the one given).
func ParseMix(spec string) ([]*Source, error) {
	var out []*Source
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, w := item, 1.0
		if i := strings.LastIndexByte(item, ':'); i >= 0 {
			name = item[:i]
			v, err := strconv.ParseFloat(item[i+1:], 64)
			if err != nil || !(v > 0) || v > 1e12 {
				return nil, fmt.Errorf("dataset: --mix %s: weight %q must be a positive number", name, item[i+1:])
			}
			w = v
		}
		if m, ok := presets.Mixtures[name]; ok {
			var names []string
			for n := range m {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				s, err := presetSourceNamed(n, w*m[n])
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
			continue
		}
		s, err := presetSourceNamed(name, w)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("dataset: --mix names no source")
	}
	return out, nil
}

func presetSourceNamed(name string, w float64) (*Source, error) {
	p, ok := presets.Sources[name]
	if !ok {
		srcs, mixes := Presets()
		return nil, fmt.Errorf("dataset: --mix: no preset %q; the presets are %s and the mixtures %s (or give hf:org/name with --data)",
			name, strings.Join(srcs, ", "), strings.Join(mixes, ", "))
	}
	return &Source{Name: name, Kind: KindHub, Repo: p.Repo, Config: p.Config, Split: p.Split, Field: p.Field, Weight: w, Licence: p.Licence}, nil
}

// doc is a document and the source it came from.
type doc struct {
	text string
	src  int
}

// mix interleaves the sources' documents by weight: the next document
// comes from the source that has given the fewest bytes for its weight
// (ties to the first), so each source's share of the bytes follows the
// weights to within one document, deterministically. The mixture ends
// when a source is exhausted — continuing without it would break the
// weights — or when stop returns true, or at the first error. With one
// source, it is simply that source. It reports whether a source ran out
// (and which) through exhausted.
func mix(ctx context.Context, srcs []*Source, out func(d doc) (stop bool, err error)) (exhausted int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	type feed struct {
		ch  chan string
		err error
	}
	feeds := make([]*feed, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		f := &feed{ch: make(chan string, 16)}
		feeds[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(f.ch)
			f.err = s.Documents(ctx, func(d string) error {
				select {
				case f.ch <- d:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
		}()
	}
	// Cancel first, so that sources blocked on a send return, then wait.
	defer func() { cancel(); wg.Wait() }()
	given := make([]float64, len(srcs))
	for {
		best := 0
		for i := range srcs {
			if given[i]/srcs[i].Weight < given[best]/srcs[best].Weight {
				best = i
			}
		}
		d, ok := <-feeds[best].ch
		if !ok {
			cancel()
			wg.Wait()
			if e := feeds[best].err; e != nil && !errors.Is(e, context.Canceled) {
				return -1, e
			}
			for _, f := range feeds {
				if f.err != nil && !errors.Is(f.err, context.Canceled) {
					return -1, f.err
				}
			}
			return best, nil
		}
		given[best] += float64(len(d))
		stop, err := out(doc{text: d, src: best})
		if err != nil {
			return -1, err
		}
		if stop {
			return -1, nil
		}
	}
}
