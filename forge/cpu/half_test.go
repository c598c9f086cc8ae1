package cpu

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/half"
)

var halfDTypes = []backend.DType{backend.Float16, backend.BFloat16}

// halfBits rounds x once to dt's bits.
func halfBits(dt backend.DType, x float64) uint16 {
	if dt == backend.Float16 {
		return half.Float16BitsFrom64(x)
	}
	return half.BFloat16BitsFrom64(x)
}

// halfValue widens dt's bits h.
func halfValue(dt backend.DType, h uint16) float64 {
	if dt == backend.Float16 {
		return float64(half.Float16FromBits(h))
	}
	return float64(half.BFloat16FromBits(h))
}

// TestHalfBuffers checks Alloc, Len, DType, Write and Read of 16-bit
// buffers, pooled and not, and that host slices of another type are
// refused.
func TestHalfBuffers(t *testing.T) {
	be := New()
	for _, dt := range halfDTypes {
		for _, n := range []int{0, 5, poolMinElems + 7} {
			buf := be.Alloc(dt, n)
			if buf.Len() != n || buf.DType() != dt {
				t.Fatalf("Alloc(%v, %d): Len %d DType %v", dt, n, buf.Len(), buf.DType())
			}
			in := make([]uint16, n)
			for i := range in {
				in[i] = uint16(i*7919 + 3)
			}
			be.Write(buf, in)
			out := make([]uint16, n)
			be.Read(buf, out)
			for i := range in {
				if out[i] != in[i] {
					t.Fatalf("%v[%d]: wrote %#04x, read %#04x", dt, i, in[i], out[i])
				}
			}
		}
		buf := be.Alloc(dt, 3)
		for _, host := range []any{[]float32{1}, []int32{1}, []float64{1}} {
			msg := panicMsg(func() { be.Write(buf, host) })
			if !strings.Contains(msg, "does not match") {
				t.Errorf("Write(%v, %T): panic %q, want a dtype mismatch", dt, host, msg)
			}
		}
	}
	f := be.Alloc(backend.Float32, 3)
	if msg := panicMsg(func() { be.Read(f, make([]uint16, 3)) }); !strings.Contains(msg, "does not match") {
		t.Errorf("Read(float32, []uint16): panic %q, want a dtype mismatch", msg)
	}
}

func panicMsg(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	fn()
	return ""
}

// readAll returns the whole buffer of v as float64 values.
func readAll(be *Backend, b backend.Buffer) []float64 {
	out := make([]float64, b.Len())
	switch b.DType() {
	case backend.Float32:
		h := make([]float32, b.Len())
		be.Read(b, h)
		for i, x := range h {
			out[i] = float64(x)
		}
	case backend.Float64:
		be.Read(b, out)
	case backend.Int32:
		h := make([]int32, b.Len())
		be.Read(b, h)
		for i, x := range h {
			out[i] = float64(x)
		}
	default:
		h := make([]uint16, b.Len())
		be.Read(b, h)
		for i, x := range h {
			out[i] = halfValue(b.DType(), x)
		}
	}
	return out
}

// convertRef is Copy's conversion of one value x of dtype from (exact in
// float64) to dtype to, as a float64.
func convertRef(to backend.DType, x float64) float64 {
	switch to {
	case backend.Float32:
		return float64(float32(x))
	case backend.Int32:
		return math.Trunc(x)
	case backend.Float64:
		return x
	}
	return halfValue(to, halfBits(to, x))
}

// TestHalfCopy checks Copy between every pair of the five dtypes, on
// contiguous, strided (transposed, offset) and broadcast sources and a
// strided destination, against the element-by-element reference.
func TestHalfCopy(t *testing.T) {
	be := New()
	all := []backend.DType{backend.Float32, backend.Float64, backend.Int32, backend.Float16, backend.BFloat16}
	rng := rand.New(rand.NewSource(7))
	const rows, cols = 37, 29
	for _, from := range all {
		for _, to := range all {
			if from != to && !from.IsHalf() && !to.IsHalf() {
				continue // the existing conversions have their own tests
			}
			// Source values: integers (exact everywhere) when int32 is
			// involved, else floats spanning the 16-bit ranges, with ties,
			// subnormals, overflow and signed zeros.
			src := be.Alloc(from, rows*cols+3)
			vals := make([]float64, src.Len())
			for i := range vals {
				switch {
				case from == backend.Int32 || to == backend.Int32:
					vals[i] = float64(rng.Intn(4001) - 2000)
				case i%11 == 0:
					vals[i] = []float64{0, math.Copysign(0, -1), 1 + 0x1p-11, 1 + 3*0x1p-11, 65520, -1e5, 0x1p-24, 3e-39, 1e38, 1 + 0x1p-8}[i/11%10]
				default:
					vals[i] = math.Ldexp(rng.Float64()*2-1, rng.Intn(50)-25)
				}
			}
			ewWrite(be, src, vals)
			have := readAll(be, src) // the values as stored in from
			cases := []struct {
				name string
				sv   backend.View
				at   func(r, c int) int // source element index of (r, c)
			}{
				{"contig", backend.View{Buf: src, Offset: 3, Shape: []int{rows, cols}, Strides: []int{cols, 1}},
					func(r, c int) int { return 3 + r*cols + c }},
				{"transposed", backend.View{Buf: src, Offset: 0, Shape: []int{rows, cols}, Strides: []int{1, rows}},
					func(r, c int) int { return r + c*rows }},
				{"broadcast", backend.View{Buf: src, Offset: 5, Shape: []int{rows, cols}, Strides: []int{0, 1}},
					func(r, c int) int { return 5 + c }},
				{"scalar", backend.View{Buf: src, Offset: 2, Shape: []int{rows, cols}, Strides: []int{0, 0}},
					func(r, c int) int { return 2 }},
			}
			for _, c := range cases {
				// dst: every other column of a wider buffer.
				dbuf := be.Alloc(to, rows*cols*2)
				ewWrite(be, dbuf, make([]float64, dbuf.Len()))
				dv := backend.View{Buf: dbuf, Offset: 1, Shape: []int{rows, cols}, Strides: []int{2 * cols, 2}}
				be.Copy(dv, c.sv)
				got := readAll(be, dbuf)
				for r := range rows {
					for k := range cols {
						want := convertRef(to, have[c.at(r, k)])
						g := got[1+r*2*cols+2*k]
						if !(g == want && math.Signbit(g) == math.Signbit(want)) && !(math.IsNaN(g) && math.IsNaN(want)) {
							t.Fatalf("Copy %v→%v %s at (%d,%d): got %v, want %v (source %v)", from, to, c.name, r, k, g, want, have[c.at(r, k)])
						}
					}
				}
				// The gaps are untouched.
				if got[0] != 0 || got[2] != 0 {
					t.Fatalf("Copy %v→%v %s wrote outside the destination view", from, to, c.name)
				}
			}
		}
	}
}

// TestHalfCopyRoundsOnce checks that float64 → 16-bit Copy rounds once:
// values just above a 16-bit tie that a float32 step would round onto it.
func TestHalfCopyRoundsOnce(t *testing.T) {
	be := New()
	for _, c := range []struct {
		dt   backend.DType
		x    float64
		want float64
	}{
		{backend.Float16, 1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-10},
		{backend.BFloat16, 1 + 0x1p-8 + 0x1p-40, 1 + 0x1p-7},
	} {
		src := be.Alloc(backend.Float64, 1)
		be.Write(src, []float64{c.x})
		dst := be.Alloc(c.dt, 1)
		be.Copy(backend.View{Buf: dst, Shape: []int{1}, Strides: []int{1}}, backend.View{Buf: src, Shape: []int{1}, Strides: []int{1}})
		if got := readAll(be, dst)[0]; got != c.want {
			t.Errorf("Copy float64 %v → %v: got %v, want %v", c.x, c.dt, got, c.want)
		}
		be.Fill(backend.View{Buf: dst, Shape: []int{1}, Strides: []int{1}}, c.x)
		if got := readAll(be, dst)[0]; got != c.want {
			t.Errorf("Fill %v %v: got %v, want %v", c.dt, c.x, got, c.want)
		}
	}
}

// TestHalfFill checks Fill on contiguous and strided 16-bit views.
func TestHalfFill(t *testing.T) {
	be := New()
	for _, dt := range halfDTypes {
		for _, v := range []float64{0, math.Copysign(0, -1), 1.0 / 3, -2.5, 1e6, 1e-9, math.Inf(-1), math.NaN()} {
			buf := be.Alloc(dt, 2*poolMinElems)
			ewWrite(be, buf, make([]float64, buf.Len()))
			be.Fill(backend.View{Buf: buf, Offset: 1, Shape: []int{poolMinElems}, Strides: []int{2}}, v)
			got := readAll(be, buf)
			want := halfValue(dt, halfBits(dt, v))
			for i, g := range got {
				w := 0.0
				if i%2 == 1 {
					w = want
				}
				if !(g == w && math.Signbit(g) == math.Signbit(w)) && !(math.IsNaN(g) && math.IsNaN(w)) {
					t.Fatalf("Fill(%v, %v) element %d = %v, want %v", dt, v, i, g, w)
				}
			}
		}
	}
}

// TestHalfKernelsRefuse calls every compute kernel with 16-bit views and
// checks each panics naming the kernel and the dtype (the CPU computes in
// float32 and float64 only).
func TestHalfKernelsRefuse(t *testing.T) {
	be := New()
	for _, dt := range halfDTypes {
		h := func(shape ...int) backend.View {
			n := 1
			for _, d := range shape {
				n *= d
			}
			return backend.View{Buf: be.Alloc(dt, n), Shape: shape, Strides: backend.ContiguousStrides(shape)}
		}
		ix := func(shape ...int) backend.View {
			n := 1
			for _, d := range shape {
				n *= d
			}
			return backend.View{Buf: be.Alloc(backend.Int32, n), Shape: shape, Strides: backend.ContiguousStrides(shape)}
		}
		f64 := func(shape ...int) backend.View {
			return backend.View{Buf: be.Alloc(backend.Float64, backend.ClipStateLen), Shape: shape, Strides: backend.ContiguousStrides(shape)}
		}
		none := backend.View{}
		ap := backend.AttentionParams{Scale: 0.5, Causal: true}
		op := backend.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
		calls := map[string]func(){
			"unary":               func() { be.Unary(backend.Exp, backend.Scalars{}, h(2, 4), h(2, 4)) },
			"unary_grad":          func() { be.UnaryGrad(backend.Exp, backend.Scalars{}, h(2, 4), h(2, 4), h(2, 4), h(2, 4)) },
			"binary":              func() { be.Binary(backend.Add, h(2, 4), h(2, 4), h(2, 4)) },
			"where":               func() { be.Where(h(2, 4), h(2, 4), h(2, 4), h(2, 4)) },
			"reduce":              func() { be.Reduce(backend.ReduceSum, h(2), h(2, 4), 1) },
			"reduce argmax":       func() { be.Reduce(backend.ReduceArgMax, ix(2), h(2, 4), 1) },
			"matmul":              func() { be.MatMul(h(2, 2), h(2, 4), h(4, 2), false) },
			"matmul_many":         func() { be.MatMulMany([]backend.MatMulOp{{Dst: h(2, 2), A: h(2, 4), B: h(4, 2)}}) },
			"softmax":             func() { be.Softmax(h(2, 4), h(2, 4), false) },
			"softmax_backward":    func() { be.SoftmaxBackward(h(2, 4), h(2, 4), h(2, 4), true) },
			"layer_norm":          func() { be.LayerNorm(h(2, 4), h(2), h(2), h(2, 4), h(4), none, 1e-5) },
			"layer_norm_backward": func() { be.LayerNormBackward(h(2, 4), h(4), h(4), h(2, 4), h(2, 4), h(4), h(2), h(2)) },
			"rms_norm":            func() { be.RMSNorm(h(2, 4), h(2), h(2, 4), h(4), 1e-5) },
			"rms_norm_backward":   func() { be.RMSNormBackward(h(2, 4), h(4), h(2, 4), h(2, 4), h(4), h(2)) },
			"rope":                func() { be.RoPE(h(1, 2, 4), h(1, 2, 4), 0, 1e4, false) },
			"rope_strided":        func() { be.RoPEStrided(h(1, 2, 4), h(1, 2, 4), 0, 1e4, false) },
			"index_select":        func() { be.IndexSelect(h(1, 2, 4), h(1, 3, 4), ix(2), 1) },
			"index_add":           func() { be.IndexAdd(h(1, 3, 4), h(1, 2, 4), ix(2), 1) },
			"gather":              func() { be.Gather(h(2, 2), h(2, 4), ix(2, 2), 1) },
			"scatter_add":         func() { be.ScatterAdd(h(2, 4), h(2, 2), ix(2, 2), 1) },
			"attention":           func() { be.Attention(h(1, 1, 2, 4), h(1, 1, 2), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), ap) },
			"attention_backward": func() {
				be.AttentionBackward(h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2, 4), h(1, 1, 2), h(1, 1, 2, 4), ap)
			},
			"cross_entropy":           func() { be.CrossEntropy(h(2), h(2), h(2, 4), ix(2), -1) },
			"cross_entropy_backward":  func() { be.CrossEntropyBackward(h(2, 4), h(2, 4), h(2), ix(2), backend.View{}, -1, 1) },
			"swiglu":                  func() { be.SwiGLU(h(8), h(8), h(8)) },
			"swiglu_backward":         func() { be.SwiGLUBackward(h(8), h(8), h(8), h(8), h(8)) },
			"sum_squares":             func() { be.SumSquares(h(1), h(8)) },
			"adamw":                   func() { be.AdamW(h(8), h(8), h(8), h(8), op) },
			"adamw (clipped)":         func() { be.AdamWClipped(h(8), h(8), h(8), h(8), f64(backend.ClipStateLen), op) },
			"grad_clip":               func() { be.GradClip(f64(backend.ClipStateLen), h(3), 1, 1) },
			"cross_entropy (f32 out)": func() { be.CrossEntropy(h(2), h(2), h(2, 4), ix(2), -1) },
		}
		for name, call := range calls {
			msg := panicMsg(call)
			if !strings.Contains(msg, "unsupported dtype "+dt.String()) || !strings.HasPrefix(msg, "cpu: ") {
				t.Errorf("%s on %v: panic %q, want cpu: <kernel>: unsupported dtype %v", name, dt, msg, dt)
			}
		}
	}
}
