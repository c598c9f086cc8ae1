// Package nn holds the layers a GPT is built from — Linear, Embedding,
// RMSNorm, LayerNorm, Attention (multi-head and grouped-query, RoPE or
// none), MLP (SwiGLU or GELU), MoE (a routed mixture of expert MLPs) and
// the pre-norm transformer Block — and the Module interface that names
// their parameters.
//
// # Modules and names
//
// A Module lists its parameters as Params: a dotted name
// ("blocks.3.attn.wqkv.weight") and the tensor. Names are built by the
// module tree (Prefix), in a fixed order, so they are stable keys for
// checkpoints, optimizer state and summaries. Summarize turns any module
// into rows (name, shape, count) a front end can render.
//
// # Layouts
//
// Weights use PyTorch's layouts, so checkpoints read in PyTorch without
// transposes: Linear.Weight is (out, in) and y = x·Wᵀ (+ b); Embedding is
// (V, C). Shape letters: B batch, T time, C channels (d_model), H query
// heads, K key/value heads, D head dimension, F MLP hidden size.
//
// # Errors
//
// Like package forge, misuse (a wrong shape, a config that cannot work)
// panics with a *forge.Error naming the layer and the shapes; constructors
// that take user configuration return errors instead.
//
// Everything here is composed from the public forge API, so it runs
// unchanged on every backend.
package nn

import (
	"fmt"
	"path"
	"strings"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/internal/numfmt"
)

// Param is one named parameter.
type Param struct {
	Name   string
	Tensor *forge.Tensor
}

// Module is anything with parameters.
type Module interface {
	// Params lists the module's parameters, names relative to the module,
	// in a fixed order.
	Params() []Param
}

// Prefix returns ps with "prefix." prepended to every name.
func Prefix(prefix string, ps []Param) []Param {
	out := make([]Param, len(ps))
	for i, p := range ps {
		out[i] = Param{Name: prefix + "." + p.Name, Tensor: p.Tensor}
	}
	return out
}

// Tensors returns the tensors of m's parameters, in order.
func Tensors(m Module) []*forge.Tensor {
	ps := m.Params()
	out := make([]*forge.Tensor, len(ps))
	for i, p := range ps {
		out[i] = p.Tensor
	}
	return out
}

// Find returns m's parameter called name.
func Find(m Module, name string) (*forge.Tensor, bool) {
	for _, p := range m.Params() {
		if p.Name == name {
			return p.Tensor, true
		}
	}
	return nil, false
}

// Match returns the parameters whose names match the shell pattern glob
// (path.Match syntax, where "*" also crosses dots: "blocks.*.attn.*"), or
// contain glob as a substring when it has no pattern characters.
func Match(m Module, glob string) []Param {
	var out []Param
	plain := !strings.ContainsAny(glob, "*?[")
	for _, p := range m.Params() {
		ok := false
		if plain {
			ok = strings.Contains(p.Name, glob)
		} else {
			// path.Match stops "*" at "/": dots are not slashes, so "*"
			// crosses them, as a user typing blocks.*.attn.* expects.
			ok, _ = path.Match(glob, p.Name)
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// Count returns the number of scalar parameters of m.
func Count(m Module) int {
	n := 0
	for _, p := range m.Params() {
		n += p.Tensor.Numel()
	}
	return n
}

// SummaryRow describes one parameter.
type SummaryRow struct {
	Name  string
	Shape []int
	Count int
	Share float64 // of the module's total

	// The weight of a Linear (when the module is a LinearLister): its
	// fake quantiser ("" for none) and the fraction its mask prunes.
	Quant    string
	Sparsity float64
	Masked   bool
}

// Notes is the row's quantiser and mask, e.g. "int8, mask 50.0%" ("" for
// neither).
func (r SummaryRow) Notes() string {
	var ns []string
	if r.Quant != "" && r.Quant != forge.QuantNone {
		ns = append(ns, r.Quant)
	}
	if r.Masked {
		ns = append(ns, fmt.Sprintf("mask %.1f%%", 100*r.Sparsity))
	}
	return strings.Join(ns, ", ")
}

// Summary lists a module's parameters and their total.
type Summary struct {
	Rows  []SummaryRow
	Total int
}

// Summarize describes m's parameters; a LinearLister's weights also show
// their quantiser and mask.
func Summarize(m Module) Summary {
	var s Summary
	lin := map[string]*Linear{}
	if ll, ok := m.(LinearLister); ok {
		for _, l := range ll.Linears() {
			lin[l.Name+".weight"] = l.Layer
		}
	}
	for _, p := range m.Params() {
		n := p.Tensor.Numel()
		r := SummaryRow{Name: p.Name, Shape: p.Tensor.Shape(), Count: n}
		if l := lin[p.Name]; l != nil && l.Weight == p.Tensor {
			r.Quant, r.Masked, r.Sparsity = l.Quant, l.Mask != nil, l.Sparsity()
		}
		s.Rows = append(s.Rows, r)
		s.Total += n
	}
	for i := range s.Rows {
		if s.Total > 0 {
			s.Rows[i].Share = float64(s.Rows[i].Count) / float64(s.Total)
		}
	}
	return s
}

// String renders the summary as an aligned table.
func (s Summary) String() string {
	wName, wShape := len("parameter"), len("shape")
	shapes := make([]string, len(s.Rows))
	notes := false
	for i, r := range s.Rows {
		shapes[i] = fmt.Sprint(r.Shape)
		wName = max(wName, len(r.Name))
		wShape = max(wShape, len(shapes[i]))
		notes = notes || r.Notes() != ""
	}
	var b strings.Builder
	head := fmt.Sprintf("%-*s  %-*s  %12s  %6s", wName, "parameter", wShape, "shape", "count", "share")
	if notes {
		head += "  notes"
	}
	b.WriteString(head + "\n")
	for i, r := range s.Rows {
		line := fmt.Sprintf("%-*s  %-*s  %12s  %5.1f%%", wName, r.Name, wShape, shapes[i], numfmt.Thousands(r.Count), 100*r.Share)
		if n := r.Notes(); n != "" {
			line += "  " + n
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %12s\n", wName, "total", wShape, "", numfmt.Thousands(s.Total))
	return b.String()
}

// Sequence is an ordered list of modules named "0", "1", ….
type Sequence[M Module] []M

// Params implements Module.
func (s Sequence[M]) Params() []Param {
	var out []Param
	for i, m := range s {
		out = append(out, Prefix(fmt.Sprint(i), m.Params())...)
	}
	return out
}

// errorf builds the panic value of a misused layer.
func errorf(op, format string, args ...any) *forge.Error {
	return &forge.Error{Op: "nn." + op, Msg: fmt.Sprintf(format, args...)}
}
