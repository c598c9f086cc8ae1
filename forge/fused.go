package forge

import (
	"math"

	"github.com/forgeml/forge/forge/backend"
)

// SwiGLU returns silu(a)·b, the gate of a SwiGLU MLP
// (W_down · (silu(x·W_gate) ⊙ x·W_up)), as one fused kernel forward and one
// backward: the same values as a.SiLU().Mul(b), without the intermediate
// tensors and their passes over memory. a and b must have one shape (for
// broadcasting, use the composition). On a device without the fused kernel
// (backend.KernelSwiGLU) it is that composition.
func SwiGLU(a, b *Tensor) *Tensor {
	sameFloat("swiglu", a, b)
	if !equalShape(a.shape, b.shape) {
		panic(errorf("swiglu", "operands must have one shape, got %v and %v (use a.SiLU().Mul(b) to broadcast)", a.shape, b.shape))
	}
	if !a.dev.Supports(backend.KernelSwiGLU, a.dtype) {
		return a.SiLU().Mul(b)
	}
	a, b = a.Contiguous(), b.Contiguous()
	y := newTensor(a.dev, a.dtype, a.shape)
	n := int64(a.Numel())
	launch(a.dev, kcall{in: tensors(a, b), out: tensors(y), name: "swiglu", dt: a.dtype, shapes: shapesOf(a, b, y), bytes: bytesOf(a, b, y), flops: 6 * n},
		func(be backend.Backend) { be.SwiGLU(y.bv(), a.bv(), b.bv()) })
	return record(y, "swiglu", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		g = g.Contiguous()
		da := newTensor(g.dev, g.dtype, g.shape)
		db := newTensor(g.dev, g.dtype, g.shape)
		launch(g.dev, kcall{in: tensors(a, b, g), out: tensors(da, db), name: "swiglu.backward", dt: g.dtype, shapes: shapesOf(a, b, g, da, db), bytes: bytesOf(a, b, g, da, db), flops: 12 * n},
			func(be backend.Backend) { be.SwiGLUBackward(da.bv(), db.bv(), a.bv(), b.bv(), g.bv()) })
		return []*Tensor{da, db}
	})
}

// SumSquares returns Σ t² over all elements as a 0-d tensor (float32 for a
// 16-bit t), computed by one fused kernel (accumulated in float64 on the
// CPU, deterministic).
func (t *Tensor) SumSquares() *Tensor {
	sameFloat("sum_squares", t)
	x := t.Contiguous()
	out := newTensor(t.dev, statDType(t.dtype), nil)
	sumSquaresInto(out, 0, x)
	return record(out, "sum_squares", []*Tensor{x}, func(g *Tensor) []*Tensor {
		return []*Tensor{x.Mul(g.MulScalar(2).Cast(x.dtype))}
	})
}

// sumSquaresInto runs the SumSquares kernel of contiguous x into element i
// of the 1-D (or 0-d) contiguous dst.
func sumSquaresInto(dst *Tensor, i int, x *Tensor) {
	d := dst.view([]int{}, []int{}, dst.offset+i)
	if !x.dev.Supports(backend.KernelSumSquares, x.dtype) {
		sumSquaresComposed(d, x)
		return
	}
	launch(x.dev, kcall{in: tensors(x), out: tensors(d), name: "sum_squares", dt: x.dtype, shapes: shapesOf(x), bytes: bytesOf(x), flops: 2 * int64(x.Numel())},
		func(be backend.Backend) { be.SumSquares(d.bv(), x.bv()) })
}

// SumSquaresOf returns Σ t² of each tensor (float tensors, on any devices),
// as float64s in the order given: one fused kernel per tensor, the results
// of all tensors sharing a device and dtype written to one buffer that is
// read back once. No graph is recorded. It is the reduction behind
// global-norm gradient clipping.
func SumSquaresOf(ts []*Tensor) []float64 {
	out := make([]float64, len(ts))
	type key struct {
		dev *Device
		dt  DType
	}
	groups := map[key][]int{}
	var order []key
	for i, t := range ts {
		sameFloat("sum_squares", t)
		k := key{t.dev, t.dtype}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		sums := newTensor(k.dev, statDType(k.dt), []int{len(idx)})
		for j, i := range idx {
			sumSquaresInto(sums, j, ts[i].Contiguous())
		}
		for j, v := range sums.Float64s() {
			out[idx[j]] = v
		}
	}
	return out
}

// AdamWParams configures one fused AdamW update (see backend.AdamWParams).
type AdamWParams = backend.AdamWParams

// AdamWUpdate applies one AdamW update in place, as one fused kernel, to
// param and its first and second moments m and v, from grad (all of one
// shape, dtype and device; param, m and v contiguous):
//
//	m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	param ← param·(1 − lr·wd) − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps)
//
// Like CopyFrom, it writes in place and is not recorded: call it inside
// NoGrad on a parameter that requires a gradient.
func AdamWUpdate(param, grad, m, v *Tensor, p AdamWParams) {
	checkAdamW(param, grad, m, v, p)
	g := grad.Contiguous()
	if !param.dev.Supports(backend.KernelAdamW, param.dtype) {
		adamWComposed(param, g, m, v, p)
		return
	}
	launch(param.dev, kcall{in: tensors(param, g, m, v), out: tensors(param, m, v), name: "adamw", dt: param.dtype, shapes: shapesOf(param, g, m, v), bytes: bytesOf(param, g, m, v, param, m, v), flops: 14 * int64(param.Numel())},
		func(be backend.Backend) { be.AdamW(param.bv(), g.bv(), m.bv(), v.bv(), p) })
}

// checkAdamW panics unless AdamWUpdate's operands and hyperparameters are
// valid.
func checkAdamW(param, grad, m, v *Tensor, p AdamWParams) {
	const op = "adamw"
	sameFloat(op, param, grad, m, v)
	for _, u := range []*Tensor{grad, m, v} {
		if !equalShape(u.shape, param.shape) {
			panic(errorf(op, "shapes differ: param %v, grad %v, m %v, v %v", param.shape, grad.shape, m.shape, v.shape))
		}
	}
	for _, u := range []*Tensor{param, m, v} {
		if !u.IsContiguous() {
			panic(errorf(op, "param, m and v must be contiguous (updated in place); got strides %v for %v", u.strides, u.shape))
		}
		if u.requiresGrad && GradEnabled() {
			panic(errorf(op, "in-place update of %v, which requires a gradient, while recording; wrap it in forge.NoGrad", u.shape))
		}
	}
	if p.Step < 1 {
		panic(errorf(op, "step must be ≥ 1 (1-based), got %d", p.Step))
	}
	for _, f := range []float64{p.LR, p.Beta1, p.Beta2, p.Eps, p.WeightDecay} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			panic(errorf(op, "hyperparameters must be finite, got %+v", p))
		}
	}
}

// MulScalarInPlace multiplies t by s in place and returns t. Views of t
// see the new values. Like CopyFrom, it is not recorded: call it inside
// NoGrad on a tensor that requires a gradient (gradient clipping scales
// Grad() this way). t must not be a broadcast view.
func (t *Tensor) MulScalarInPlace(s float64) *Tensor {
	sameFloat("mul_scalar_in_place", t)
	if t.requiresGrad && GradEnabled() {
		panic(errorf("mul_scalar_in_place", "in-place write to %v, which requires a gradient, while recording; wrap it in forge.NoGrad", t.shape))
	}
	for i, st := range t.strides {
		if st == 0 && t.shape[i] > 1 {
			panic(errorf("mul_scalar_in_place", "%v is a broadcast view (stride 0 on axis %d): its elements share memory", t.shape, i))
		}
	}
	sc := backend.Scalars{A: s}
	launch(t.dev, kcall{in: tensors(t), out: tensors(t), name: "unary.affine", dt: t.dtype, shapes: shapesOf(t, t), bytes: 2 * bytesOf(t), flops: int64(t.Numel())},
		func(b backend.Backend) { b.Unary(backend.Affine, sc, t.bv(), t.bv()) })
	return t
}

// GradClip is global-norm gradient clipping computed where the gradients
// live, llm.c style: NewGradClip queues the norm and the clip coefficient
// on the device, AdamWUpdateClipped folds the coefficient into the
// optimizer's read of the gradient (the gradients themselves are never
// scaled), and nothing is read back until Norm or Skipped asks. On a
// device that queues kernels (Metal) a whole training step — forward,
// backward, clip, optimizer — is then one submission with one wait.
//
// The state of a clip is three numbers (backend.KernelGradClip): the norm
// √Σ‖g‖², the coefficient min(1, maxNorm/(norm + 1e-6)) (1 without
// clipping) and a skip flag, set when the norm is not finite, which makes
// every AdamWUpdateClipped of the clip a no-op. With a loss scale
// (NewGradClipScaled) the gradients are the true ones times the scale:
// the norm is the true gradients' and the coefficient includes 1/scale,
// so the update sees the true, clipped gradients without a pass that
// unscales them.
type GradClip struct {
	maxNorm float64
	groups  []clipGroup
	vals    *[backend.ClipStateLen]float64 // read back (or computed on the host)
}

// clipGroup is the state of a clip on one (device, dtype) of gradients.
type clipGroup struct {
	dev   *Device
	dt    DType
	state *Tensor // (ClipStateLen) in the backend's ClipStateDType; nil: use vals
}

// NewGradClip starts global-norm clipping of grads (float tensors) to at
// most maxNorm; maxNorm 0 computes the norm and the skip flag without
// clipping. When the gradients share one device and dtype and the backend
// runs backend.KernelGradClip, it only queues kernels — one SumSquares
// per gradient into one buffer, then one GradClip that adds them in order
// (deterministic) — and reads nothing back. Otherwise it computes the norm
// on the host (SumSquaresOf, one read-back per device and dtype). No graph
// is recorded.
func NewGradClip(grads []*Tensor, maxNorm float64) *GradClip {
	return NewGradClipScaled(grads, maxNorm, 1)
}

// NewGradClipScaled is NewGradClip for gradients of a loss multiplied by
// lossScale (float16's dynamic loss scaling): the clip acts on the
// gradients divided by lossScale — Norm is their norm, and the
// coefficient AdamWUpdateClipped applies includes 1/lossScale — while the
// gradient tensors keep their scaled values. A lossScale that is a power
// of two makes the result bit for bit that of unscaling in place first
// (barring overflow or underflow of the scaled values).
func NewGradClipScaled(grads []*Tensor, maxNorm, lossScale float64) *GradClip {
	const op = "grad_clip"
	if !(maxNorm >= 0) || math.IsInf(maxNorm, 0) {
		panic(errorf(op, "max norm must be finite and ≥ 0, got %v", maxNorm))
	}
	if !(lossScale > 0) || math.IsInf(lossScale, 0) {
		panic(errorf(op, "loss scale must be finite and > 0, got %v", lossScale))
	}
	unscale := 1 / lossScale
	c := &GradClip{maxNorm: maxNorm}
	for _, g := range grads {
		sameFloat(op, g)
		if c.group(g.dev, g.dtype) == nil {
			c.groups = append(c.groups, clipGroup{dev: g.dev, dt: g.dtype})
		}
	}
	if len(c.groups) == 1 {
		gr := &c.groups[0]
		if gr.dev.Supports(backend.KernelGradClip, gr.dt) {
			sums := newTensor(gr.dev, statDType(gr.dt), []int{len(grads)})
			Independent(func() { // each sum writes its own element of sums
				for j, g := range grads {
					sumSquaresInto(sums, j, g.Contiguous())
				}
			})
			gr.state = newTensor(gr.dev, gr.dev.b.ClipStateDType(gr.dt), []int{backend.ClipStateLen})
			launch(gr.dev, kcall{in: tensors(sums), out: tensors(gr.state), name: op, dt: gr.dt, shapes: shapesOf(sums, gr.state), bytes: bytesOf(sums, gr.state), flops: int64(len(grads)) + 4},
				func(be backend.Backend) {
					be.GradClip(gr.state.bv(), sums.bv(), maxNorm, unscale)
				})
			return c
		}
	}
	// On the host: the sums in the order of grads, added in float64.
	total := 0.0
	for _, s := range SumSquaresOf(grads) {
		total += s
	}
	norm := math.Sqrt(total) * unscale
	coef, skip := backend.ClipFactor(norm, maxNorm)
	coef *= unscale
	c.vals = &[backend.ClipStateLen]float64{backend.ClipNorm: norm, backend.ClipCoef: coef, backend.ClipSkip: skip}
	for i := range c.groups {
		gr := &c.groups[i]
		if gr.dev.Supports(backend.KernelGradClip, gr.dt) {
			gr.state = newTensor(gr.dev, gr.dev.b.ClipStateDType(gr.dt), []int{backend.ClipStateLen})
			if gr.state.dtype == Float64 {
				gr.dev.b.Write(gr.state.buf, c.vals[:])
			} else {
				gr.dev.b.Write(gr.state.buf, []float32{float32(norm), float32(coef), float32(skip)})
			}
		}
	}
	return c
}

func (c *GradClip) group(dev *Device, dt DType) *clipGroup {
	for i := range c.groups {
		if c.groups[i].dev == dev && c.groups[i].dt == dt {
			return &c.groups[i]
		}
	}
	return nil
}

// values returns the state, reading it back on first use (on a queueing
// device, this waits for the kernels queued so far).
func (c *GradClip) values() *[backend.ClipStateLen]float64 {
	if c.vals == nil {
		v := c.groups[0].state.Float64s()
		c.vals = (*[backend.ClipStateLen]float64)(v)
	}
	return c.vals
}

// MaxNorm returns the clip's limit (0: no clipping).
func (c *GradClip) MaxNorm() float64 { return c.maxNorm }

// Norm returns the global L2 norm of the gradients before clipping,
// reading it back from the device on first use.
func (c *GradClip) Norm() float64 { return c.values()[backend.ClipNorm] }

// Coef returns the factor the update scales the gradients by (1:
// unclipped, without a loss scale; it includes 1/lossScale), reading it
// back on first use.
func (c *GradClip) Coef() float64 { return c.values()[backend.ClipCoef] }

// Skipped reports whether the norm is not finite, in which case every
// AdamWUpdateClipped of the clip left its parameter unchanged. It reads
// the state back on first use.
func (c *GradClip) Skipped() bool { return c.values()[backend.ClipSkip] != 0 }

// Factors returns the clip's coefficient and skip flag as tensors of shape
// (1) on dev in dtype dt, for an update composed from ops that must honour
// the clip without reading it back (optim.Muon): the gradient to use is
// grad·coef, and skip is 1 when the step must leave everything unchanged
// (forge.Where(skip, old, new)), else 0. The clip must have been computed
// over gradients on dev of dtype dt. Where the state lives on the device
// nothing is read back; elsewhere the values already on the host are
// filled in.
func (c *GradClip) Factors(dev *Device, dt DType) (coef, skip *Tensor) {
	const op = "grad_clip.factors"
	gr := c.group(dev, dt)
	if gr == nil {
		panic(errorf(op, "the clip was computed over no gradient on %s of %v", dev.name, dt))
	}
	if gr.state == nil {
		v := c.values()
		return fullOn(op, dev, dt, []int{1}, v[backend.ClipCoef]), fullOn(op, dev, dt, []int{1}, v[backend.ClipSkip])
	}
	coef = gr.state.Narrow(0, backend.ClipCoef, 1).Cast(dt)
	skip = gr.state.Narrow(0, backend.ClipSkip, 1).Cast(dt)
	return coef, skip
}

// AdamWUpdateClipped is AdamWUpdate with grad scaled by the clip's
// coefficient, unless the clip skips the step (a non-finite norm), in
// which case param, m and v are left unchanged. On a backend.KernelGradClip
// the scale is read on the device inside the one fused kernel (grad is
// not written); elsewhere the clip's values are read back and the scaled
// gradient is a temporary.
func AdamWUpdateClipped(param, grad, m, v *Tensor, c *GradClip, p AdamWParams) {
	checkAdamW(param, grad, m, v, p)
	if c == nil {
		panic(errorf("adamw", "no clip given; use AdamWUpdate to update without one"))
	}
	gr := c.group(param.dev, param.dtype)
	if gr == nil {
		panic(errorf("adamw", "the clip was computed over no gradient on %s of %v (param %v)", param.dev.name, param.dtype, param.shape))
	}
	g := grad.Contiguous()
	if gr.state != nil {
		st := gr.state
		launch(param.dev, kcall{in: tensors(param, g, m, v, st), out: tensors(param, m, v), name: "adamw_clipped", dt: param.dtype, shapes: shapesOf(param, g, m, v, st), bytes: bytesOf(param, g, m, v, param, m, v), flops: 15 * int64(param.Numel())},
			func(be backend.Backend) {
				be.AdamWClipped(param.bv(), g.bv(), m.bv(), v.bv(), st.bv(), p)
			})
		return
	}
	if c.Skipped() {
		return
	}
	if coef := c.Coef(); coef != 1 {
		g = g.MulScalar(coef)
	}
	AdamWUpdate(param, g, m, v, p)
}

// Recycle returns the memory of tensors that are no longer reachable to the
// device's pool now rather than at the next garbage collection
// (Backend.Recycle); a no-op where the device frees memory itself. A
// trainer calls it after each step: on the CPU it saves the next step's
// first allocations from fresh pages (a page fault each 4 KiB: on an
// Intel Xeon, ~10k faults a small step became ~4.3k, and the tiny step
// went from 108.8 to 101–104 ms; the small step's change was within the
// noise).
func (d *Device) Recycle() {
	d.b.Recycle()
}

// Flush submits the kernels queued on the device without waiting for them
// (Backend.Flush): the device starts on them, and memory they release is
// recycled once they complete. A no-op on a device that runs kernels as
// they are called (the CPU). A trainer flushes after each micro-batch of a
// gradient-accumulation step.
func (d *Device) Flush() {
	d.b.Flush()
}
