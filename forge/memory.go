package forge

import "github.com/forgeml/forge/forge/backend"

// Deterministic release of device memory.
//
// A tensor's memory normally returns to its device when the garbage
// collector finds the tensor unreachable. Go's collector does not see
// device memory, so on a GPU a training step would otherwise grow to the
// pool's budget before anything came back, and the pool would then have
// to wait for the device and force collections. Two mechanisms free memory
// at known points instead:
//
//   - Backward frees, as it goes, the gradients of intermediate tensors
//     once the rule of the op that made them has consumed them, and the
//     temporaries the rules allocate. It frees only memory it allocated
//     itself and that nothing outside it can reach: a leaf's Grad, and
//     anything allocated before Backward started, are never freed.
//   - Collect runs a function and frees, when it returns, the memory of
//     every tensor allocated inside it except those passed to Keep and the
//     gradients Backward left on leaves. A trainer runs each micro-batch's
//     forward and backward inside one.
//   - ReleaseGrad drops a leaf's gradient and frees its memory, for a
//     trainer starting the backward that makes the next ones.
//
// Using a tensor whose memory was freed panics, naming the tensor.

// arena records the tensors allocated while a Collect (or a Backward) runs.
type arena struct {
	allocs []*Tensor
	parent *arena
}

// curArena is the innermost arena (nil outside any); like the autograd
// state, it belongs to the goroutine that builds graphs.
var curArena *arena

func pushArena() *arena {
	a := &arena{parent: curArena}
	curArena = a
	return a
}

// pop ends a: it frees what free says to, and hands the rest (except
// pinned tensors) to the enclosing arena.
func (a *arena) pop(free bool) {
	curArena = a.parent
	for _, t := range a.allocs {
		switch {
		case t.freedBy != "" || t.pinned:
		case free:
			t.release(freedByCollect)
		case a.parent != nil:
			t.arena = a.parent
			a.parent.allocs = append(a.parent.allocs, t)
		}
	}
	a.allocs = nil
}

// track records a newly allocated tensor in the innermost arena.
func track(t *Tensor) {
	if a := curArena; a != nil {
		t.arena = a
		a.allocs = append(a.allocs, t)
	}
}

// pin exempts t's memory from every arena: it outlives them all (a
// leaf's gradient, a kept tensor).
func pin(t *Tensor) { t.storageOwner().pinned = true }

// What freed a tensor's memory, for the message of a later use.
const (
	freedByCollect    = "at the end of the forge.Collect that allocated it; call forge.Keep on tensors that must outlive it"
	freedByBackward   = "by Backward, which consumed it"
	freedByCheckpoint = "by forge.Checkpoint, which keeps only its input and result (Backward computes the rest again)"
	freedByRelease    = "by ReleaseGrad (a trainer releases the previous step's gradients when the next step starts); copy a gradient to keep it"
)

// release frees t's memory now; why says what freed it. t must own its
// buffer (be the tensor that allocated it).
func (t *Tensor) release(why string) {
	if t.freedBy != "" {
		return
	}
	t.freedBy = why
	t.dev.b.Free(t.buf)
}

// ReleaseGrad clears the gradient, as ZeroGrad does, and returns its
// memory to the device now instead of when the garbage collector finds it
// unreachable. The old gradient tensor, and every view of it, must not be
// used afterwards (a use panics saying so). A trainer calls it on every
// parameter before the backward that makes new gradients.
func (t *Tensor) ReleaseGrad() {
	g := t.grad
	t.grad = nil
	if g != nil {
		g.storageOwner().release(freedByRelease)
	}
}

// Collect runs fn, then frees the device memory of every tensor allocated
// while fn ran, except those passed to Keep and the gradients accumulated
// on leaves. Views of a freed tensor are freed with it. Collect frees
// nothing if fn panics. Calls nest: an inner Collect frees what was
// allocated inside it.
//
// It is for code that knows which of its tensors outlive it, such as a
// training step: what the garbage collector would free eventually is
// freed at once, so a GPU's memory does not fill with the dead tensors of
// earlier steps.
func Collect(fn func()) {
	a := pushArena()
	ok := false
	defer func() { a.pop(ok) }()
	fn()
	ok = true
}

// Keep exempts ts (and every view sharing their memory) from being freed
// by the enclosing Collect calls: their memory returns when the garbage
// collector finds them unreachable, as outside a Collect.
func Keep(ts ...*Tensor) {
	for _, t := range ts {
		if t != nil {
			pin(t)
		}
	}
}

// checkLive panics if t's memory was freed by Collect or Backward.
func (t *Tensor) checkLive() {
	why := t.storageOwner().freedBy
	if why == "" {
		return
	}
	name := ""
	if t.name != "" {
		name = " " + t.name
	}
	panic(errorf("use", "tensor%s %v was freed %s", name, t.shape, why))
}

// MemoryStats is a device's memory in bytes (backend.MemoryStats): Live
// in tensors now, Peak the most since ResetPeak, Held from the system
// (free lists included), Budget the most the device should hold (0: no
// limit but the system's memory).
type MemoryStats = backend.MemoryStats

// Memory reports the device's memory; zeros if the device does not count
// it.
func (d *Device) Memory() MemoryStats { return d.b.Memory() }

// ResetPeak starts the device's peak memory again from what is live now,
// so that the peak of one phase of work can be read after it.
func (d *Device) ResetPeak() { d.b.ResetPeak() }
