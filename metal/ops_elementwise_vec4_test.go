package metal

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/emu"
)

// vec4Case is one Binary call on flat views: n elements, each operand at
// an element offset, a or b a broadcast scalar when its flag is set.
type vec4Case struct {
	n                int
	dOff, aOff, bOff int
	aScalar, bScalar bool
}

// vec4Cases: lengths below, at and past multiples of 4 (tails of 0–3),
// aligned and unaligned offsets (one unaligned operand keeps the whole call
// scalar), broadcast scalars at any offset (never loaded as vectors).
var vec4Cases = []vec4Case{
	{n: 3}, {n: 4}, {n: 5}, {n: 7}, {n: 8}, {n: 1027}, {n: 4096},
	{n: 1027, dOff: 4, aOff: 8, bOff: 12},
	{n: 1025, dOff: 1}, {n: 1026, aOff: 2}, {n: 1027, bOff: 3},
	{n: 1029, bScalar: true, bOff: 5},
	{n: 1030, aScalar: true, aOff: 1, dOff: 4},
	{n: 1031, aScalar: true, bScalar: true, bOff: 2},
}

// vec4Want reports whether c is bound aligned for the vector loop: every
// non-broadcast view's offset a multiple of 4 elements (the pool's
// sub-allocations are 256-byte aligned) and at least 4 elements.
func (c vec4Case) vec4Want() bool {
	ok := c.n >= 4 && c.dOff%4 == 0
	if !c.aScalar {
		ok = ok && c.aOff%4 == 0
	}
	if !c.bScalar {
		ok = ok && c.bOff%4 == 0
	}
	return ok
}

// vec4Call is one elementwise op on dst from the operands a and b.
type vec4Call struct {
	name string
	fn   func(dev *Backend, dst, a, b backend.View)
}

// vec4Calls: Copy (of a; copy_x32 at float32, the scalar copy_cvt at
// 16 bits), Binary ops, Unary (of a), UnaryGrad (x = a, g = b, y
// recomputed; and y = b, g = a).
var vec4Calls = func() []vec4Call {
	cs := []vec4Call{{"copy", func(dev *Backend, d, a, _ backend.View) { dev.Copy(d, a) }}}
	for _, op := range []backend.BinaryOp{backend.Add, backend.Mul, backend.Div, backend.Pow, backend.Maximum, backend.Lt} {
		cs = append(cs, vec4Call{fmt.Sprintf("binary %v", op), func(dev *Backend, d, a, b backend.View) { dev.Binary(op, d, a, b) }})
	}
	sc := backend.Scalars{A: 0.5, B: 2}
	for _, op := range []backend.UnaryOp{backend.Exp, backend.GELUTanh, backend.Sqrt, backend.Affine} {
		cs = append(cs,
			vec4Call{fmt.Sprintf("unary %v", op), func(dev *Backend, d, a, _ backend.View) { dev.Unary(op, sc, d, a) }},
			vec4Call{fmt.Sprintf("unary_grad %v", op), func(dev *Backend, d, a, b backend.View) { dev.UnaryGrad(op, sc, d, a, backend.View{}, b) }},
			vec4Call{fmt.Sprintf("unary_grad %v, y given", op), func(dev *Backend, d, a, b backend.View) { dev.UnaryGrad(op, sc, d, a, b, a) }})
	}
	return cs
}()

// run makes call f for c on dev with operands from host values ha, hb
// (copied to every dtype), returning dst's bits.
func (c vec4Case) run(dev *Backend, f vec4Call, dt backend.DType, ha, hb []float32) []uint32 {
	view := func(off int, scalar bool) backend.View {
		st := 1
		if scalar {
			st = 0
		}
		return backend.View{Shape: []int{c.n}, Strides: []int{st}, Offset: off}
	}
	up := func(h []float32) backend.Buffer {
		b32 := dev.Alloc(backend.Float32, len(h))
		dev.Write(b32, h)
		x := dev.Alloc(dt, len(h))
		dev.Copy(contigView(x, 0, len(h)), contigView(b32, 0, len(h)))
		return x
	}
	a, b := view(c.aOff, c.aScalar), view(c.bOff, c.bScalar)
	a.Buf, b.Buf = up(ha), up(hb)
	d := view(c.dOff, false)
	d.Buf = dev.Alloc(dt, c.n+c.dOff)
	dev.Fill(contigView(d.Buf, 0, c.n+c.dOff), 7)
	f.fn(dev, d, a, b)
	return readBits(dev, d.Buf, c.n+c.dOff)
}

// TestElementwiseVec4: the vectorised loops of copy.metal, binary.metal
// and unary.metal (copy_vec4, binary_vec4, unary_vec4) give the scalar
// loops' bits —
// every dtype, lengths with tails, broadcast scalars, UnaryGrad with and
// without y — and are taken exactly where the operands are aligned; on the
// emulator, under every thread schedule.
func TestElementwiseVec4(t *testing.T) {
	dev := opsDevice(t)
	defer noVec4.Store(false)
	rng := rand.New(rand.NewPCG(3, 4))
	host := func(n int) []float32 {
		h := make([]float32, n)
		for i := range h {
			h[i] = float32(rng.NormFloat64() * 3)
		}
		return h
	}
	for _, c := range vec4Cases {
		// The decision, from the arguments bound for c's views.
		l := coalesce(
			backend.View{Shape: []int{c.n}, Strides: []int{1}, Offset: c.dOff},
			backend.View{Shape: []int{c.n}, Strides: []int{map[bool]int{true: 0, false: 1}[c.aScalar]}, Offset: c.aOff},
			backend.View{Shape: []int{c.n}, Strides: []int{map[bool]int{true: 0, false: 1}[c.bScalar]}, Offset: c.bOff})
		for _, dt := range floatTypes {
			bufs := [3]backend.Buffer{dev.Alloc(dt, c.n+8), dev.Alloc(dt, c.n+8), dev.Alloc(dt, c.n+8)}
			var args [3]kernelArg
			for i := range args {
				args[i] = dev.arg(l.view(bufs[i], i))
			}
			noVec4.Store(false)
			if got := ewVec4(l, dt.Size(), args[:]); got != c.vec4Want() {
				t.Errorf("%+v %v: vector loop %v, want %v", c, dt, got, c.vec4Want())
			}
			ha, hb := host(c.n+c.aOff), host(c.n+c.bOff)
			for _, f := range vec4Calls {
				noVec4.Store(false)
				vec := c.run(dev, f, dt, ha, hb)
				noVec4.Store(true)
				scalar := c.run(dev, f, dt, ha, hb)
				if i := firstDiff(vec, scalar); i >= 0 {
					t.Fatalf("%+v %v %s: element %d: vector loop %#x, scalar %#x", c, dt, f.name, i, vec[i], scalar[i])
				}
			}
		}
	}
	noVec4.Store(false)

	drv, ok := dev.Driver().(*emu.Driver)
	if !ok {
		t.Skipf("not the emulator: %T", dev.Driver())
	}
	defer drv.SetSchedule(emu.Forward, 0)
	ha, hb := host(4200), host(4200)
	var labels []string
	schedulesAgree(t, drv, func() [][]uint32 {
		labels = labels[:0]
		var outs [][]uint32
		for _, c := range vec4Cases {
			for _, dt := range floatTypes {
				for _, f := range []vec4Call{vec4Calls[0], vec4Calls[2], vec4Calls[10], vec4Calls[11], vec4Calls[12]} { // copy, mul, gelu_tanh: unary, grad, grad with y
					outs = append(outs, c.run(dev, f, dt, ha, hb))
					labels = append(labels, fmt.Sprintf("%+v %v %s", c, dt, f.name))
				}
			}
		}
		return outs
	}, func(i int) string { return labels[i] })
}

// firstDiff is the first index where a and b differ, or −1.
func firstDiff(a, b []uint32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	if !slices.Equal(a, b) {
		return 0
	}
	return -1
}

// TestAdamWVec4: adamw_f32's vector loop (adamw_vec4) gives the scalar
// loop's bits for w, m and v, plain and with a clip state (coefficient
// below 1), over lengths with tails and operands at aligned and unaligned
// offsets, and is taken exactly where all four are aligned.
func TestAdamWVec4(t *testing.T) {
	dev := opsDevice(t)
	defer noVec4.Store(false)
	rng := rand.New(rand.NewPCG(5, 6))
	clip := dev.Alloc(backend.Float32, backend.ClipStateLen)
	dev.Write(clip, []float32{4, 0.25, 0}) // norm 4, coefficient 0.25, no skip
	for _, c := range []struct{ n, wOff, gOff, mOff, vOff int }{
		{3, 0, 0, 0, 0}, {4, 0, 0, 0, 0}, {7, 0, 0, 0, 0}, {1025, 0, 0, 0, 0}, {1027, 4, 8, 12, 16},
		{1026, 1, 0, 0, 0}, {1027, 0, 2, 0, 0}, {1028, 0, 0, 3, 0}, {1029, 0, 0, 0, 5},
	} {
		host := func(off int, scale float64, pos bool) []float32 {
			h := make([]float32, off+c.n)
			for i := range h {
				h[i] = float32(rng.NormFloat64() * scale)
				if pos {
					h[i] = float32(math.Abs(float64(h[i])))
				}
			}
			return h
		}
		hw, hg, hm, hv := host(c.wOff, 1, false), host(c.gOff, 0.1, false), host(c.mOff, 0.01, false), host(c.vOff, 1e-3, true)
		for _, clipped := range []bool{false, true} {
			run := func(vec bool) [3][]uint32 {
				noVec4.Store(!vec)
				up := func(h []float32, off int) backend.View {
					b := dev.Alloc(backend.Float32, len(h))
					dev.Write(b, h)
					return contigView(b, off, c.n)
				}
				w, g, m, v := up(hw, c.wOff), up(hg, c.gOff), up(hm, c.mOff), up(hv, c.vOff)
				p := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3}
				if clipped {
					dev.AdamWClipped(w, g, m, v, contigView(clip, 0, backend.ClipStateLen), p)
				} else {
					dev.AdamW(w, g, m, v, p)
				}
				return [3][]uint32{readBits(dev, w.Buf, len(hw)), readBits(dev, m.Buf, len(hm)), readBits(dev, v.Buf, len(hv))}
			}
			vec, scalar := run(true), run(false)
			for k, name := range []string{"w", "m", "v"} {
				if i := firstDiff(vec[k], scalar[k]); i >= 0 {
					t.Fatalf("%+v clipped %v: %s element %d: vector loop %#x, scalar %#x", c, clipped, name, i, vec[k][i], scalar[k][i])
				}
			}
		}
		noVec4.Store(false)
		aligned := c.n >= 4 && c.wOff%4 == 0 && c.gOff%4 == 0 && c.mOff%4 == 0 && c.vOff%4 == 0
		var args [4]kernelArg
		for i, off := range []int{c.wOff, c.gOff, c.mOff, c.vOff} {
			args[i] = dev.arg(contigView(dev.Alloc(backend.Float32, c.n+off), off, c.n))
		}
		if got := ewVec4(layout{shape: []int{c.n}, strides: [][]int{{1}, {1}, {1}, {1}}}, 4, args[:]); got != aligned {
			t.Errorf("%+v: vector loop %v, want %v", c, got, aligned)
		}
	}
}
