package forge

// node records the op that produced a tensor: its differentiable inputs and
// the rule mapping the output's gradient to theirs.
type node struct {
	op       string
	inputs   []*Tensor
	backward func(g *Tensor) []*Tensor // one gradient (or nil) per input

	// accumulate, if set, adds the gradient of the node's single input
	// into acc in place instead of materialising it (a Narrow's gradient
	// is zero outside its window). Backward uses it when the input already
	// has an accumulator of its own.
	accumulate func(acc, g *Tensor)

	// freshGrads: the rule returns newly allocated gradients that nothing
	// else refers to (the matmul's pair of products). passOwned: the rule
	// returns a view of its upstream gradient (a permutation, a reshape),
	// so the result is unshared exactly when that gradient is. Backward
	// then owns such a gradient: it adds later contributions into it in
	// place, and a leaf keeps it as its Grad instead of a copy.
	freshGrads, passOwned bool
}

// gradEntry is a gradient being accumulated during Backward. owned means
// the tensor was allocated by the accumulation itself and nothing else
// refers to it, so later contributions may be added in place.
type gradEntry struct {
	t     *Tensor
	owned bool
}

// gradDepth counts nested NoGrad calls; recording is on when it is 0.
var gradDepth int

// NoGrad runs fn without recording a graph: tensors created inside do not
// require gradients.
func NoGrad(fn func()) {
	gradDepth++
	defer func() { gradDepth-- }()
	fn()
}

// GradEnabled reports whether ops record a graph now.
func GradEnabled() bool { return gradDepth == 0 }

// record makes out the result of op on inputs with the given backward rule,
// if recording is on and any input requires a gradient. It returns out.
func record(out *Tensor, op string, inputs []*Tensor, backward func(g *Tensor) []*Tensor) *Tensor {
	if gradDepth > 0 {
		return out
	}
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			out.requiresGrad = true
			out.node = &node{op: op, inputs: inputs, backward: backward}
			return out
		}
	}
	return out
}

// RequiresGrad marks a leaf tensor as needing a gradient and returns it.
func (t *Tensor) RequiresGrad() *Tensor {
	if t.node != nil {
		panic(errorf("requires_grad", "only leaf tensors can be marked; %v was made by %s (use Detach first)", t.shape, t.node.op))
	}
	if !t.dtype.IsFloat() {
		panic(errorf("requires_grad", "only float tensors can require gradients, got %v %v", t.dtype, t.shape))
	}
	t.requiresGrad = true
	return t
}

// SetRequiresGrad sets or clears the gradient flag of a leaf tensor.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	if on {
		return t.RequiresGrad()
	}
	if t.node != nil {
		panic(errorf("requires_grad", "cannot clear the flag of a non-leaf tensor %v (use Detach)", t.shape))
	}
	t.requiresGrad = false
	return t
}

// RequiresGradFlag reports whether the tensor requires a gradient.
func (t *Tensor) RequiresGradFlag() bool { return t.requiresGrad }

// Grad returns the gradient accumulated by Backward (nil if none).
func (t *Tensor) Grad() *Tensor { return t.grad }

// SetGrad replaces the accumulated gradient (nil clears it).
func (t *Tensor) SetGrad(g *Tensor) {
	if g == nil {
		t.grad = nil
		return
	}
	if !equalShape(g.shape, t.shape) {
		panic(errorf("set_grad", "gradient shape %v differs from tensor shape %v", g.shape, t.shape))
	}
	sameFloat("set_grad", t, g)
	// Own the memory: Backward accumulates into it in place.
	t.grad = g.contiguousCopy()
}

// ZeroGrad clears the accumulated gradient.
func (t *Tensor) ZeroGrad() { t.grad = nil }

// Detach returns a tensor sharing t's memory that is not part of any graph.
func (t *Tensor) Detach() *Tensor {
	d := t.view(t.shape, t.strides, t.offset)
	d.name = t.name
	return d
}

// Backward computes the gradient of t with respect to every leaf that
// requires one, accumulating into their Grad. t must be a scalar (one
// element) unless a gradient of t's shape is given.
//
// The graph is released as it is consumed: after Backward, the tensors the
// graph saved are no longer referenced by it, and calling Backward again
// through the same graph panics.
func (t *Tensor) Backward(grad ...*Tensor) {
	if !t.requiresGrad {
		panic(errorf("backward", "tensor %v does not require a gradient (no input had RequiresGrad)", t.shape))
	}
	prev := phase
	phase = PhaseBackward
	gradDepth++
	bw := pushArena()
	defer func() { bw.pop(false); gradDepth--; phase = prev }()
	var g *Tensor
	switch {
	case len(grad) > 1:
		panic(errorf("backward", "at most one upstream gradient, got %d", len(grad)))
	case len(grad) == 1 && grad[0] != nil:
		g = grad[0]
		if !equalShape(g.shape, t.shape) {
			panic(errorf("backward", "upstream gradient shape %v differs from tensor shape %v", g.shape, t.shape))
		}
		sameFloat("backward", t, g)
	default:
		if t.Numel() != 1 {
			panic(errorf("backward", "needs a scalar, got shape %v; pass an upstream gradient of that shape", t.shape))
		}
		g = OnesLike(t)
	}

	order := topoSort(t)
	grads := map[*Tensor]gradEntry{t: {t: g}}
	mem := backwardMemory{bw: bw, refs: map[*Tensor]int{}}
	mem.ref(g)
	for i := len(order) - 1; i >= 0; i-- {
		u := order[i]
		e, ok := grads[u]
		delete(grads, u)
		if !ok {
			continue
		}
		mark := len(bw.allocs)
		gu := e.t
		gu.fillPendingZeros() // complete before anything reads it
		if u.node == nil {
			if u.grad == nil && e.owned && gu.IsContiguous() {
				u.grad = gu // unshared: no copy needed
			} else {
				accumulateGrad(u, gu)
			}
			pin(u.grad)
			mem.unref(gu)
			mem.freeDead(mark)
			continue
		}
		n := u.node
		if n.backward == nil {
			panic(errorf("backward", "the graph through %s %v was already released by an earlier Backward", n.op, u.shape))
		}
		if acc, ok := grads[n.inputs[0]]; ok && acc.owned && n.accumulate != nil {
			n.accumulate(acc.t, gu)
		} else {
			gins := n.backward(gu)
			fresh := n.accumulate != nil || n.freshGrads || (n.passOwned && e.owned)
			for j, in := range n.inputs {
				if in == nil || !in.requiresGrad || gins[j] == nil {
					continue
				}
				gi := gins[j]
				if !equalShape(gi.shape, in.shape) {
					panic(errorf("backward", "internal: %s produced gradient %v for input %v", n.op, gi.shape, in.shape))
				}
				old, ok := grads[in]
				switch {
				case !ok:
					grads[in] = gradEntry{t: gi, owned: fresh}
					mem.ref(gi)
				case old.owned:
					old.t.fillPendingZeros()
					gi.fillPendingZeros()
					addInto(old.t, gi)
				default:
					gi.fillPendingZeros()
					sum := old.t.Add(gi)
					grads[in] = gradEntry{t: sum, owned: true}
					mem.ref(sum)
					mem.unref(old.t)
				}
			}
		}
		// Release what the graph saved: the rule's closure and the inputs.
		n.backward = nil
		n.inputs = nil
		mem.unref(gu)
		mem.freeDead(mark)
	}
}

// backwardMemory frees, during Backward, the gradients it has consumed
// and the temporaries of the rules: memory Backward allocated (tracked by
// its arena) that no pending gradient shares and no leaf keeps as its
// Grad (pinned). refs counts the pending gradients (the entries of
// Backward's map) by the tensor owning their memory; a rule may return its
// upstream gradient or a view of it, so several entries can share one.
type backwardMemory struct {
	bw   *arena
	refs map[*Tensor]int
	cand []*Tensor
}

func (m *backwardMemory) ref(t *Tensor) { m.refs[t.storageOwner()]++ }

func (m *backwardMemory) unref(t *Tensor) {
	o := t.storageOwner()
	if m.refs[o]--; m.refs[o] <= 0 {
		delete(m.refs, o)
	}
	m.cand = append(m.cand, o)
}

// freeDead frees the candidates (gradients unreferenced since the last
// call, and the allocations since bw.allocs[mark]) that are dead.
func (m *backwardMemory) freeDead(mark int) {
	for _, o := range append(m.cand, m.bw.allocs[mark:]...) {
		if o.arena == m.bw && !o.pinned && m.refs[o] == 0 {
			o.release(freedByBackward)
		}
	}
	m.cand = m.cand[:0]
}

// accumulateGrad adds g into the leaf u's gradient.
func accumulateGrad(u, g *Tensor) {
	if u.grad == nil {
		// Own the memory: g may be a view of another tensor or broadcast.
		u.grad = g.contiguousCopy()
		return
	}
	addInto(u.grad, g)
}

// topoSort returns the tensors reachable from t through nodes, inputs
// before the tensors computed from them.
func topoSort(t *Tensor) []*Tensor {
	var order []*Tensor
	seen := map[*Tensor]bool{}
	type frame struct {
		t    *Tensor
		next int
	}
	stack := []frame{{t: t}}
	seen[t] = true
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		var ins []*Tensor
		if f.t.node != nil {
			ins = f.t.node.inputs
		}
		if f.next < len(ins) {
			in := ins[f.next]
			f.next++
			if in != nil && in.requiresGrad && !seen[in] {
				seen[in] = true
				stack = append(stack, frame{t: in})
			}
			continue
		}
		order = append(order, f.t)
		stack = stack[:len(stack)-1]
	}
	return order
}

func equalShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
