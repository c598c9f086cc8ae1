package forge

import (
	"errors"
	"strings"
	"testing"
)

// ckptBlock is a residual block with parameters it closes over, a norm,
// a product, GELU, dropout and a second use of its input (the residual):
// x + drop(gelu(rmsnorm(x)·W1)·W2). (B, C) → (B, C)
type ckptBlock struct {
	norm, w1, w2 *Tensor // (C), (C, F), (F, C)
	p            float64
	gen          *Generator
}

func newCkptBlock(g *Generator, dev *Device, C, F int, p float64, drop *Generator) *ckptBlock {
	leaf := func(t *Tensor) *Tensor { return t.To(dev).RequiresGrad() }
	return &ckptBlock{
		norm: leaf(g.Rand(Float32, C).AddScalar(0.5)),
		w1:   leaf(g.Randn(Float32, C, F).MulScalar(0.3)),
		w2:   leaf(g.Randn(Float32, F, C).MulScalar(0.3)),
		p:    p, gen: drop,
	}
}

func (b *ckptBlock) forward(x *Tensor) *Tensor {
	h := RMSNorm(x, b.norm, 1e-5).MatMul(b.w1).GELU().MatMul(b.w2)
	return x.Add(Dropout(h, b.p, b.gen))
}

func (b *ckptBlock) params() []*Tensor { return []*Tensor{b.norm, b.w1, b.w2} }

// ckptRun builds a 3-block chain on dev, runs forward (checkpointing the
// blocks ck says) and backward, and returns the loss and every gradient
// (input first) as host values.
func ckptRun(t *testing.T, dev *Device, ck []bool, p float64) (float32, [][]float32) {
	t.Helper()
	const B, C, F = 6, 8, 24
	init, drop := NewGenerator(7), NewGenerator(11)
	var blocks []*ckptBlock
	for range ck {
		blocks = append(blocks, newCkptBlock(init, dev, C, F, p, drop))
	}
	x := init.Randn(Float32, B, C).To(dev).RequiresGrad()
	h := x
	for i, b := range blocks {
		if ck[i] {
			h = Checkpoint(b.forward, h)
		} else {
			h = b.forward(h)
		}
	}
	loss := h.Square().Mean()
	loss.Backward()
	grads := [][]float32{x.Grad().Float32s()}
	for _, b := range blocks {
		for _, w := range b.params() {
			grads = append(grads, w.Grad().Float32s())
		}
	}
	// The generator went on as if nothing had been recomputed.
	if got := drop.Uint64(); got != ckptNextDraw(ck, p) {
		t.Errorf("checkpoint %v: the dropout generator's next draw is %x, want %x (its state was not put back)", ck, got, ckptNextDraw(ck, p))
	}
	return float32(loss.Item()), grads
}

// ckptNextDraw is the draw after a 3-block chain's dropout masks.
func ckptNextDraw(ck []bool, p float64) uint64 {
	g := NewGenerator(11)
	if p > 0 {
		for range len(ck) * 6 * 8 {
			g.Uint64()
		}
	}
	return g.Uint64()
}

// TestCheckpointGradientsBitExact: a chain of blocks with dropout, each
// block checkpointed or not in every pattern, gives the same loss and the
// same gradient for the input and every parameter, bit for bit (==), as
// the chain without checkpointing; the recomputation saw the same masks
// (a different mask would change the gradients of W2 and of the input).
func TestCheckpointGradientsBitExact(t *testing.T) {
	dev := DefaultDevice()
	for _, p := range []float64{0, 0.3} {
		wantLoss, want := ckptRun(t, dev, []bool{false, false, false}, p)
		for _, ck := range [][]bool{{true, true, true}, {true, false, true}, {false, true, false}} {
			loss, got := ckptRun(t, dev, ck, p)
			if loss != wantLoss {
				t.Errorf("p %g checkpoint %v: loss %v, want %v", p, ck, loss, wantLoss)
			}
			for i := range want {
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						t.Fatalf("p %g checkpoint %v: gradient %d [%d] = %v, want %v", p, ck, i, j, got[i][j], want[i][j])
					}
				}
			}
		}
	}
}

// TestCheckpointDropoutMasksMatter: the check above can fail. Recomputing
// with a generator that moved on (as Checkpoint would without putting
// its state back) changes the gradients.
func TestCheckpointDropoutMasksMatter(t *testing.T) {
	dev := DefaultDevice()
	_, want := ckptRun(t, dev, []bool{false}, 0.3)
	init, drop := NewGenerator(7), NewGenerator(11)
	b := newCkptBlock(init, dev, 8, 24, 0.3, drop)
	x := init.Randn(Float32, 6, 8).To(dev).RequiresGrad()
	h := Checkpoint(b.forward, x)
	g := b.gen
	b.gen = NewGenerator(99) // recompute with other masks
	h.Square().Mean().Backward()
	b.gen = g
	same := true
	for j, v := range b.w2.Grad().Float32s() {
		same = same && v == want[3][j]
	}
	if same {
		t.Fatal("other dropout masks in the recomputation gave the same W2 gradient: the bit-exact test could not fail")
	}
}

// TestCheckpointFreesIntermediates: on a metered device, a checkpointed
// block leaves only its result live after the forward (the plain block
// leaves its intermediates: norm output, two products, GELU, mask,
// dropout), and after Backward what stays is the gradients of the leaves.
func TestCheckpointFreesIntermediates(t *testing.T) {
	dev, m := meteredDevice(t)
	const B, C, F = 64, 64, 256
	init := NewGenerator(3)
	b := newCkptBlock(init, dev, C, F, 0.2, NewGenerator(5))
	x := init.Randn(Float32, B, C).To(dev).RequiresGrad()
	act := int64(4 * B * C)
	before := m.live
	plain := b.forward(x)
	plainLive := m.live - before
	start := m.live
	m.peak = m.live
	y := Checkpoint(b.forward, x)
	if got := m.live - start; got != act {
		t.Errorf("after the checkpointed forward %d bytes more are live, want the result alone (%d); the plain forward kept %d", got, act, plainLive)
	}
	if plainLive < 4*act {
		t.Errorf("the plain forward kept only %d bytes; the test needs intermediates to free", plainLive)
	}
	if m.peak-start < plainLive {
		t.Errorf("the checkpointed forward peaked at %d bytes above its start, below the plain forward's %d: did it run?", m.peak-start, plainLive)
	}
	_ = plain
	live := m.live
	y.Square().Mean().Backward()
	var grads int64
	for _, w := range append(b.params(), x) {
		grads += int64(4 * w.Numel())
	}
	// The loss, its square and the mean (scalars and (B, C) live from
	// before Backward) stay; the recomputation's tensors do not.
	if left := m.live - live; left > grads+2*act {
		t.Errorf("after backward %d bytes more are live, want the leaves' gradients (%d) and the loss's inputs", left, grads)
	}
}

// TestCheckpointPhaseAndScope: the recomputation's kernels run in the
// backward phase; its forward kernels carry the block's scope plus
// "/recompute"; a checkpoint inside NoGrad is the plain call.
func TestCheckpointPhaseAndScope(t *testing.T) {
	init := NewGenerator(1)
	b := newCkptBlock(init, DefaultDevice(), 4, 8, 0, nil)
	x := init.Randn(Float32, 3, 4).RequiresGrad()
	var calls []KernelCall
	prev := SetObserver(Observer{Kernel: func(c KernelCall) { calls = append(calls, c) }})
	var y *Tensor
	Scope("blk", func() { y = Checkpoint(b.forward, x) })
	nScoped := len(calls)
	loss := y.Sum()
	nForward := len(calls)
	loss.Backward()
	SetObserver(prev)
	recomputed := 0
	for i, c := range calls {
		switch {
		case i < nScoped && (c.Phase != PhaseForward || c.Scope != "blk"):
			t.Errorf("forward kernel %s: phase %v scope %q, want forward in blk", c.Kernel, c.Phase, c.Scope)
		case i >= nScoped && i < nForward:
		case i >= nForward && c.Phase != PhaseBackward:
			t.Errorf("kernel %s after the forward ran in phase %v, want backward", c.Kernel, c.Phase)
		case c.Scope == "blk/recompute":
			recomputed++
		}
	}
	if recomputed < 4 {
		t.Errorf("%d kernels ran in blk/recompute, want the block's forward (norm, 2 products, GELU, add)", recomputed)
	}
	NoGrad(func() {
		if z := Checkpoint(b.forward, x); z.node != nil || z.RequiresGradFlag() {
			t.Error("Checkpoint inside NoGrad recorded a node")
		}
	})
	if err := Try(func() { Checkpoint(func(x *Tensor) *Tensor { return x.MatMul(b.w1.T()) }, x) }); err == nil || !strings.Contains(err.Error(), "matmul") {
		t.Errorf("a failing fn: got %v, want its panic", err)
	}
}

// TestCheckpointTripwire: the NaN tripwire catches a non-finite value in
// a checkpointed function's forward (phase forward, in its scope) and in
// its recomputed backward (phase backward), and the autograd state is
// whole afterwards: recording is on and a plain backward runs.
func TestCheckpointTripwire(t *testing.T) {
	SetTripwire(true)
	defer SetTripwire(false)
	x := FromSlice([]float32{-1, 4}, 2).RequiresGrad()
	err := Try(func() { Scope("blk", func() { Checkpoint(func(x *Tensor) *Tensor { return x.Log() }, x) }) })
	var fe *Error
	if !errors.As(err, &fe) || fe.Trip == nil || fe.Trip.Phase != PhaseForward || fe.Trip.Scope != "blk" {
		t.Fatalf("a NaN in the forward: %v, want a trip in blk's forward", err)
	}
	z := FromSlice([]float32{0, 4}, 2).RequiresGrad()
	var y *Tensor
	Scope("blk", func() { y = Checkpoint(func(x *Tensor) *Tensor { return x.Sqrt() }, z) })
	err = Try(func() { y.Sum().Backward() })
	if !errors.As(err, &fe) || fe.Trip == nil || fe.Trip.Phase != PhaseBackward {
		t.Fatalf("an infinity in the backward: %v, want a trip in the backward", err)
	}
	if !GradEnabled() || CurrentPhase() != PhaseForward || curArena != nil || curRNGLog != nil {
		t.Fatalf("after the trip: recording %v, phase %v, arena %v, rng log %v", GradEnabled(), CurrentPhase(), curArena, curRNGLog)
	}
	w := FromSlice([]float32{1, 2}, 2).RequiresGrad()
	w.Square().Sum().Backward()
	if g := w.Grad().Float32s(); g[0] != 2 || g[1] != 4 {
		t.Errorf("a backward after the trip: %v, want [2 4]", g)
	}
}

// TestCheckpointNestedAndInputWithoutGrad: a checkpoint inside a
// checkpointed function, and a checkpointed function whose input needs
// no gradient (only its parameters do), give the plain gradients bit for
// bit, dropout included.
func TestCheckpointNestedAndInputWithoutGrad(t *testing.T) {
	run := func(nested bool, xGrad bool) [][]float32 {
		init, drop := NewGenerator(7), NewGenerator(11)
		b1 := newCkptBlock(init, DefaultDevice(), 8, 24, 0.3, drop)
		b2 := newCkptBlock(init, DefaultDevice(), 8, 24, 0.3, drop)
		x := init.Randn(Float32, 6, 8)
		if xGrad {
			x.RequiresGrad()
		}
		two := func(h *Tensor) *Tensor { return b2.forward(b1.forward(h)) }
		if nested {
			two = func(h *Tensor) *Tensor {
				return Checkpoint(b2.forward, Checkpoint(b1.forward, h))
			}
		}
		var y *Tensor
		if nested {
			y = Checkpoint(two, x)
		} else {
			y = two(x)
		}
		y.Square().Mean().Backward()
		var gs [][]float32
		if xGrad {
			gs = append(gs, x.Grad().Float32s())
		}
		for _, w := range append(b1.params(), b2.params()...) {
			gs = append(gs, w.Grad().Float32s())
		}
		return gs
	}
	for _, xGrad := range []bool{true, false} {
		want, got := run(false, xGrad), run(true, xGrad)
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("input grad %v: gradient %d [%d] = %v nested, %v plain", xGrad, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
}
