package forge

import (
	"fmt"
	"strings"
)

// The NaN tripwire.
//
// With SetTripwire(true), every kernel's float outputs are read back when
// it returns and checked for NaN and ±Inf; the first kernel whose output
// is not finite panics with an *Error whose Trip says what it was: the
// kernel, its input and output shapes, the phase, the scope (the
// profiler's, "blocks.2"), and the named tensors (parameters) it read or
// wrote. Nothing after that kernel runs, so a trainer that catches the
// panic applies no update. Off, it costs one branch on a flag at each
// launch; on, every kernel waits for the device and copies its outputs to
// the host (see the README for the measured cost).

// tripwire is whether kernels' outputs are checked (process-wide, like
// the phase); tripChecking is set while the check itself reads tensors.
var tripwire, tripChecking bool

// tripChecks counts the checks made, for the test that off makes none.
var tripChecks int

// SetTripwire turns the NaN tripwire on or off (see Trip).
func SetTripwire(on bool) { tripwire = on }

// TripwireOn reports whether the NaN tripwire is on.
func TripwireOn() bool { return tripwire }

// Trip describes the first kernel whose output held a NaN or an
// infinity, as caught by the tripwire (Error.Trip).
type Trip struct {
	Kernel    string  // e.g. "matmul", "unary.log"
	In, Out   [][]int // the shapes it read and wrote
	Phase     Phase
	Scope     string   // the scope path, dots for the profiler's slashes ("blocks.2"); "" outside every scope
	Params    []string // the named tensors (parameters) among its operands
	Bad, Of   int      // non-finite values in the first bad output, of how many
	Value     float64  // the first of them (NaN, +Inf or -Inf)
	InputsBad []string // inputs that were already not finite ("input 1", or a name)
}

// tripCheck panics if an output of k is not finite (the tripwire).
func tripCheck(k kcall) {
	if tripChecking {
		return
	}
	tripChecks++
	tripChecking = true
	defer func() { tripChecking = false }()
	for _, o := range k.out.t[:k.out.n] {
		if !o.dtype.IsFloat() || o.storageOwner().freedBy != "" {
			continue
		}
		bad, first := countNonFinite(o)
		if bad == 0 {
			continue
		}
		tr := &Trip{Kernel: k.name, Phase: phase, Scope: strings.ReplaceAll(currentScope(), "/", "."),
			Bad: bad, Of: o.Numel(), Value: first}
		for i, t := range k.in.t[:k.in.n] {
			tr.In = append(tr.In, t.shape)
			name := t.storageOwner().name
			if name != "" {
				tr.Params = append(tr.Params, name)
			}
			if t.dtype.IsFloat() && t.storageOwner().freedBy == "" {
				if n, _ := countNonFinite(t); n > 0 {
					if name == "" {
						name = fmt.Sprintf("input %d %v", i+1, t.shape)
					}
					tr.InputsBad = append(tr.InputsBad, name)
				}
			}
		}
		for _, t := range k.out.t[:k.out.n] {
			tr.Out = append(tr.Out, t.shape)
			if name := t.storageOwner().name; name != "" {
				tr.Params = append(tr.Params, name)
			}
		}
		panic(&Error{Op: "tripwire", Msg: tr.String(), Trip: tr})
	}
}

// countNonFinite reads t and counts its NaNs and infinities, returning
// the first.
func countNonFinite(t *Tensor) (n int, first float64) {
	note := func(v float64) {
		if n == 0 {
			first = v
		}
		n++
	}
	switch d := t.Data().(type) {
	case []float32:
		for _, v := range d {
			if v-v != 0 { // NaN or ±Inf
				note(float64(v))
			}
		}
	case []float64:
		for _, v := range d {
			if v-v != 0 {
				note(v)
			}
		}
	case []uint16:
		for _, v := range widenHalf(t.dtype, d) {
			if v-v != 0 {
				note(float64(v))
			}
		}
	}
	return n, first
}

func (tr *Trip) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v from %s", tr.Value, tr.Kernel)
	shapes := func(ss [][]int) string {
		var p []string
		for _, s := range ss {
			p = append(p, fmt.Sprint(s))
		}
		return strings.Join(p, " ")
	}
	fmt.Fprintf(&b, " %s → %s (%s", shapes(tr.In), shapes(tr.Out), tr.Phase)
	if tr.Scope != "" {
		fmt.Fprintf(&b, ", in %s", tr.Scope)
	}
	b.WriteString(")")
	if len(tr.Params) > 0 {
		fmt.Fprintf(&b, ", parameter %s", strings.Join(tr.Params, ", "))
	}
	fmt.Fprintf(&b, ": %d of %d values not finite", tr.Bad, tr.Of)
	if len(tr.InputsBad) > 0 {
		fmt.Fprintf(&b, "; already not finite before it: %s", strings.Join(tr.InputsBad, ", "))
	}
	return b.String()
}
