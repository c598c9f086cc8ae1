package forge

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/forgeml/forge/forge/half"
)

// Data synchronises and returns a row-major copy of the values: []float32,
// []float64 or []int32 by dtype, and for Float16 and BFloat16 a []uint16
// of their bit patterns (package forge/half converts them; Float32s and
// Float64s return the values).
func (t *Tensor) Data() any {
	t.checkLive()
	c := t
	if !t.IsContiguous() || t.offset != 0 || t.buf.Len() != t.Numel() {
		c = t.contiguousCopy()
	}
	host := hostSlice(c.dtype, c.Numel())
	c.dev.b.Read(c.buf, host)
	return host
}

// Float64s synchronises and returns the values converted to float64.
func (t *Tensor) Float64s() []float64 {
	switch d := t.Data().(type) {
	case []float64:
		return d
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []int32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []uint16:
		out := make([]float64, len(d))
		for i, x := range widenHalf(t.dtype, d) {
			out[i] = float64(x)
		}
		return out
	}
	return nil
}

// widenHalf returns the float32 values of the Float16 or BFloat16 bits h
// (exact).
func widenHalf(dt DType, h []uint16) []float32 {
	out := make([]float32, len(h))
	if dt == BFloat16 {
		half.DecodeBFloat16(out, h)
	} else {
		half.DecodeFloat16(out, h)
	}
	return out
}

// Float32s synchronises and returns the values of a float32 tensor, or
// of a Float16 or BFloat16 one widened (exactly) to float32.
func (t *Tensor) Float32s() []float32 {
	switch t.dtype {
	case Float32:
		return t.Data().([]float32)
	case Float16, BFloat16:
		return widenHalf(t.dtype, t.Data().([]uint16))
	}
	panic(errorf("float32s", "tensor is %v, not float32, float16 or bfloat16; use Float64s or Cast", t.dtype))
}

// Int32s synchronises and returns the values of an int32 tensor.
func (t *Tensor) Int32s() []int32 {
	if t.dtype != Int32 {
		panic(errorf("int32s", "tensor is %v, not int32", t.dtype))
	}
	return t.Data().([]int32)
}

// Item synchronises and returns the value of a one-element tensor.
func (t *Tensor) Item() float64 {
	if t.Numel() != 1 {
		panic(errorf("item", "needs a tensor with one element, got shape %v", t.shape))
	}
	return t.Float64s()[0]
}

// Stats summarises a tensor's values.
type Stats struct {
	Count         int     // number of elements
	Min, Max      float64 // over finite values
	Mean, Std     float64 // over finite values; Std is the population std
	NaN, PosInf   int     // counts
	NegInf        int
	Zeros         int
	AbsMax        float64 // largest finite |x|
	Finite        int     // number of finite values
	Shape         []int
	DType         DType
	Device        string
	HasGrad       bool
	RequiresGrad  bool
	ParameterName string
}

// Stats synchronises and summarises the values: min, max, mean and std of
// the finite values, and counts of NaN, ±Inf and zeros.
func (t *Tensor) Stats() Stats {
	s := Stats{Count: t.Numel(), Shape: t.Shape(), DType: t.dtype, Device: t.dev.name,
		HasGrad: t.grad != nil, RequiresGrad: t.requiresGrad, ParameterName: t.name,
		Min: math.NaN(), Max: math.NaN(), Mean: math.NaN(), Std: math.NaN()}
	var sum, sumsq float64
	vals := t.Float64s()
	for _, x := range vals {
		switch {
		case math.IsNaN(x):
			s.NaN++
			continue
		case math.IsInf(x, 1):
			s.PosInf++
			continue
		case math.IsInf(x, -1):
			s.NegInf++
			continue
		}
		if x == 0 {
			s.Zeros++
		}
		if s.Finite == 0 || x < s.Min {
			s.Min = x
		}
		if s.Finite == 0 || x > s.Max {
			s.Max = x
		}
		s.AbsMax = math.Max(s.AbsMax, math.Abs(x))
		s.Finite++
		sum += x
	}
	if s.Finite > 0 {
		s.Mean = sum / float64(s.Finite)
		for _, x := range vals {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				sumsq += (x - s.Mean) * (x - s.Mean)
			}
		}
		s.Std = math.Sqrt(sumsq / float64(s.Finite))
	}
	return s
}

// String formats the stats on one line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %v: min %.6g  max %.6g  mean %.6g  std %.6g", s.Shape, s.DType, s.Min, s.Max, s.Mean, s.Std)
	if s.NaN+s.PosInf+s.NegInf > 0 {
		fmt.Fprintf(&b, "  nan %d  +inf %d  -inf %d", s.NaN, s.PosInf, s.NegInf)
	}
	fmt.Fprintf(&b, "  zeros %d/%d", s.Zeros, s.Count)
	return b.String()
}

// PrintOptions controls how tensors are formatted, like numpy's and torch's
// print options.
type PrintOptions struct {
	Precision int // digits after the decimal point (default 4)
	Threshold int // summarise tensors with more elements than this (1000)
	EdgeItems int // items shown at each end of a summarised axis (3)
	LineWidth int // wrap rows longer than this (80)
}

var printOpts = PrintOptions{Precision: 4, Threshold: 1000, EdgeItems: 3, LineWidth: 80}

// SetPrintOptions sets how String formats values; zero fields keep their
// current value. It returns the previous options.
func SetPrintOptions(o PrintOptions) PrintOptions {
	prev := printOpts
	if o.Precision > 0 {
		printOpts.Precision = o.Precision
	}
	if o.Threshold > 0 {
		printOpts.Threshold = o.Threshold
	}
	if o.EdgeItems > 0 {
		printOpts.EdgeItems = o.EdgeItems
	}
	if o.LineWidth > 0 {
		printOpts.LineWidth = o.LineWidth
	}
	return prev
}

// String formats the tensor like PyTorch: the values (summarised with …
// past PrintOptions.Threshold elements), then shape, dtype, device, and
// the gradient flag or the op that made it.
//
//	tensor([[ 1.0000, -2.5000],
//	        [ 0.0000,  3.1416]], shape=[2 2], dtype=float32, device=cpu, requires_grad=true)
func (t *Tensor) String() string {
	o := printOpts
	vals := t.Float64s()
	summarise := len(vals) > o.Threshold
	// Decide one number format for all elements.
	isInt := t.dtype == Int32
	allInt, maxAbs := true, 0.0
	for _, x := range vals {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			continue
		}
		if x != math.Trunc(x) {
			allInt = false
		}
		maxAbs = math.Max(maxAbs, math.Abs(x))
	}
	sci := !isInt && maxAbs != 0 && (maxAbs >= 1e8 || maxAbs < math.Pow(10, -float64(o.Precision)))
	format := func(x float64) string {
		switch {
		case math.IsNaN(x):
			return "nan"
		case math.IsInf(x, 1):
			return "inf"
		case math.IsInf(x, -1):
			return "-inf"
		case isInt:
			return strconv.FormatInt(int64(x), 10)
		case sci:
			return strconv.FormatFloat(x, 'e', o.Precision, 64)
		case allInt && maxAbs < 1e8:
			return strconv.FormatFloat(x, 'f', 0, 64) + "."
		}
		return strconv.FormatFloat(x, 'f', o.Precision, 64)
	}
	width := 0
	for _, x := range vals {
		width = max(width, len(format(x)))
	}
	var b strings.Builder
	b.WriteString("tensor(")
	const indent = len("tensor(")
	if t.Dim() == 0 {
		b.WriteString(format(vals[0]))
	} else {
		writeNested(&b, vals, t.shape, 0, 0, indent, width, format, summarise, o)
	}
	fmt.Fprintf(&b, ", shape=%v, dtype=%v, device=%s", t.shape, t.dtype, t.dev.name)
	switch {
	case t.node != nil:
		fmt.Fprintf(&b, ", grad_fn=%s", t.node.op)
	case t.requiresGrad:
		b.WriteString(", requires_grad=true")
	}
	if t.storageOwner().readOnly {
		b.WriteString(", read_only=true")
	}
	if t.name != "" {
		fmt.Fprintf(&b, ", name=%q", t.name)
	}
	b.WriteString(")")
	return b.String()
}

// writeNested writes the bracketed values of the sub-tensor at flat offset
// off with the given shape (row-major strides implied).
func writeNested(b *strings.Builder, vals []float64, shape []int, off, depth, indent, width int,
	format func(float64) string, summarise bool, o PrintOptions) {
	n := shape[0]
	inner := numel(shape[1:])
	idx := make([]int, 0, n)
	skipAt := -1
	if summarise && n > 2*o.EdgeItems {
		for i := 0; i < o.EdgeItems; i++ {
			idx = append(idx, i)
		}
		skipAt = len(idx)
		for i := n - o.EdgeItems; i < n; i++ {
			idx = append(idx, i)
		}
	} else {
		for i := 0; i < n; i++ {
			idx = append(idx, i)
		}
	}
	b.WriteByte('[')
	pad := strings.Repeat(" ", indent+depth+1)
	if len(shape) == 1 {
		col := indent + depth + 1
		for j, i := range idx {
			if j == skipAt {
				b.WriteString("..., ")
				col += 5
			}
			s := fmt.Sprintf("%*s", width, format(vals[off+i]))
			if j > 0 && col+len(s)+2 > o.LineWidth {
				b.WriteString("\n" + pad)
				col = len(pad)
			}
			b.WriteString(s)
			col += len(s)
			if j < len(idx)-1 {
				b.WriteString(", ")
				col += 2
			}
		}
		b.WriteByte(']')
		return
	}
	sep := "," + strings.Repeat("\n", len(shape)-1) + pad
	for j, i := range idx {
		if j == skipAt {
			b.WriteString("..." + sep)
		}
		writeNested(b, vals, shape[1:], off+i*inner, depth+1, indent, width, format, summarise, o)
		if j < len(idx)-1 {
			b.WriteString(sep)
		}
	}
	b.WriteByte(']')
}
