package gpt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Blocks is a set of transformer blocks, such as the ones whose
// activations are checkpointed (Config.Checkpoint). In JSON it is true
// (every block), false (none) or a list of 0-based block indices
// ([0, 2, 5]); the zero value is none. It is comparable, so Configs stay
// comparable with ==.
type Blocks struct {
	all  bool
	list string // the indices, ascending, comma-separated: "0,2,5"
}

// AllBlocks is every block.
func AllBlocks() Blocks { return Blocks{all: true} }

// BlockList is the blocks with the given indices (in any order; it
// panics on a negative or repeated index).
func BlockList(idx ...int) Blocks {
	b, err := blockList(idx)
	if err != nil {
		panic(err)
	}
	return b
}

func blockList(idx []int) (Blocks, error) {
	s := slices.Clone(idx)
	slices.Sort(s)
	parts := make([]string, len(s))
	for i, v := range s {
		if v < 0 {
			return Blocks{}, fmt.Errorf("gpt: config: checkpoint_activations: block %d: indices start at 0", v)
		}
		if i > 0 && s[i-1] == v {
			return Blocks{}, fmt.Errorf("gpt: config: checkpoint_activations: block %d is listed twice", v)
		}
		parts[i] = strconv.Itoa(v)
	}
	return Blocks{list: strings.Join(parts, ",")}, nil
}

// IsZero reports whether b holds no block.
func (b Blocks) IsZero() bool { return b == Blocks{} }

// All reports whether b is every block (true in JSON).
func (b Blocks) All() bool { return b.all }

// Indices returns the listed indices, ascending (nil for All or none).
func (b Blocks) Indices() []int {
	if b.list == "" {
		return nil
	}
	var idx []int
	for _, p := range strings.Split(b.list, ",") {
		v, _ := strconv.Atoi(p)
		idx = append(idx, v)
	}
	return idx
}

// Has reports whether block i is in b.
func (b Blocks) Has(i int) bool { return b.all || slices.Contains(b.Indices(), i) }

// Count is how many of a model's layers blocks are in b.
func (b Blocks) Count(layers int) int {
	if b.all {
		return layers
	}
	n := 0
	for _, i := range b.Indices() {
		if i < layers {
			n++
		}
	}
	return n
}

// String is b as in JSON: "true", "false" or "[0,2,5]".
func (b Blocks) String() string {
	switch {
	case b.all:
		return "true"
	case b.list == "":
		return "false"
	}
	return "[" + b.list + "]"
}

// MarshalJSON writes true, false or the list of indices.
func (b Blocks) MarshalJSON() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalJSON reads true, false or a list of distinct non-negative
// block indices, refusing anything else.
func (b *Blocks) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	var on bool
	if err := json.Unmarshal(data, &on); err == nil {
		*b = Blocks{all: on}
		return nil
	}
	var idx []int
	if err := json.Unmarshal(data, &idx); err != nil || idx == nil {
		return fmt.Errorf("gpt: config: checkpoint_activations: want true, false or a list of block indices such as [0, 2, 5], got %s", data)
	}
	nb, err := blockList(idx)
	if err != nil {
		return err
	}
	*b = nb
	return nil
}
