package forge

// Activation checkpointing.
//
// Checkpoint(fn, x) computes fn(x) and keeps only x and the result: the
// tensors fn made on the way are freed as soon as it returns, and its
// backward computes them again. The graph gets one node, "checkpoint",
// whose rule, run by Backward,
//
//  1. puts back the state every Generator drawn from inside fn had when
//     fn began (the dropout masks come out the same),
//  2. runs fn again, recording, on a leaf sharing x's memory,
//  3. runs Backward through that graph from the incoming gradient, which
//     accumulates into the Grad of every parameter fn used (fn closes over
//     them) and into the leaf standing for x,
//  4. frees what the recomputation made, puts the generators back as they
//     were, and returns the leaf's gradient as x's.
//
// The kernels are the ones the plain forward and backward run, on the same
// values, so the gradients equal those of fn(x) without Checkpoint bit for
// bit on a deterministic backend. The recomputation is attributed to the
// backward phase; its forward kernels carry the scope fn ran in plus
// "/recompute" ("blocks.3/recompute"), so profiles and the NaN tripwire
// name the block.
//
// Memory: while fn runs the first time, the peak is one call's
// activations; afterwards only x and the result stay. The backward holds
// one call's activations and their gradients at a time.

// rngLog records, while a Checkpoint's first forward runs, the state each
// generator had before its first draw (parent: an enclosing Checkpoint's).
type rngLog struct {
	gens   []*Generator
	states [][4]uint64
	parent *rngLog
}

// curRNGLog is the innermost log (nil outside Checkpoint forwards).
var curRNGLog *rngLog

// noteDraw records g's state in every enclosing log that has not seen it
// yet; Generator.Uint64 calls it before each draw.
func noteDraw(g *Generator) {
	for l := curRNGLog; l != nil; l = l.parent {
		seen := false
		for _, h := range l.gens {
			if h == g {
				seen = true
				break
			}
		}
		if !seen {
			l.gens = append(l.gens, g)
			l.states = append(l.states, g.s)
		}
	}
}

// Checkpoint returns fn(x), recomputing fn's intermediate tensors during
// Backward instead of keeping them (see above). fn must be a function of x
// and of tensors that outlive the call (parameters): it must not keep the
// tensors it makes, nor write into tensors in place. Outside recording
// (NoGrad, Backward) or when nothing fn uses requires a gradient,
// Checkpoint is fn(x).
func Checkpoint(fn func(x *Tensor) *Tensor, x *Tensor) *Tensor {
	if gradDepth > 0 {
		return fn(x)
	}
	scope := currentScope()
	log := &rngLog{parent: curRNGLog}
	curRNGLog = log
	a := pushArena()
	var out *Tensor
	func() {
		defer func() { curRNGLog = log.parent }()
		ok := false
		defer func() {
			if !ok {
				a.pop(false)
			}
		}()
		out = fn(x)
		ok = true
	}()
	keep := out.storageOwner()
	curArena = a.parent
	for _, t := range a.allocs {
		switch {
		case t.freedBy != "" || t.pinned:
		case t == keep:
			track(t)
		default:
			t.release(freedByCheckpoint)
		}
	}
	a.allocs = nil
	if !out.requiresGrad {
		return out
	}
	y := out.view(out.shape, out.strides, out.offset)
	y.requiresGrad = true
	gens, states := log.gens, log.states
	y.node = &node{op: "checkpoint", inputs: []*Tensor{x}, freshGrads: true,
		backward: func(g *Tensor) []*Tensor {
			return []*Tensor{recompute(fn, x, g, gens, states, scope)}
		}}
	return y
}

// recompute is a checkpoint node's rule: fn again from x, and Backward
// through it from g; it returns x's gradient (nil if x needs none).
func recompute(fn func(*Tensor) *Tensor, x, g *Tensor, gens []*Generator, states [][4]uint64, scope string) *Tensor {
	now := make([][4]uint64, len(gens))
	for i, gen := range gens {
		now[i] = gen.s
		gen.s = states[i]
	}
	depth := gradDepth
	gradDepth = 0
	a := pushArena()
	defer func() {
		gradDepth = depth
		for i, gen := range gens {
			gen.s = now[i]
		}
	}()
	xd := x.Detach()
	xd.requiresGrad = x.requiresGrad
	var out *Tensor
	if obs := observer.Load(); scope != "" && (obs != nil || tripwire) {
		enterScope(obs, scope+"/recompute", func() { out = fn(xd) })
	} else {
		out = fn(xd)
	}
	if out.requiresGrad {
		out.Backward(g)
	}
	gx := xd.grad
	// gx is a leaf's gradient, so Backward pinned it; it is x's gradient
	// now, which the enclosing Backward frees once consumed.
	a.pop(true)
	if gx != nil {
		owner := gx.storageOwner()
		owner.pinned = false
		track(owner)
	}
	return gx
}
