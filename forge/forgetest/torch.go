package forgetest

// PyTorch parity: every op of the forge API, forward and gradient, against
// fixtures written by tests/torch_golden.py (regenerate with `make golden`).
//
// A fixture case holds float32 inputs (or int32 indices), the expected
// outputs, one upstream tensor R per float output and the expected
// gradient of every differentiable input for loss = Σ sum(outᵢ·Rᵢ). The
// expected values are torch's float64 results on the float32 inputs,
// rounded to float32. TorchParity replays each case through the forge API
// on a device and compares elementwise:
//
//	|got − want| ≤ tol·max(1, |want|)
//
// with tol = 1e-5 unless the case carries its own (with a reason, written in
// the generator). The reported "maxdiff" is max |got − want|/max(1, |want|),
// the quantity compared with tol. Non-finite expected values must be matched
// exactly (NaN by NaN).

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
)

//go:embed testdata/torch
var torchFixtures embed.FS

// torchFile is one fixture file: the cases of one op family.
type torchFile struct {
	Family string      `json:"family"`
	Torch  string      `json:"torch"`
	Cases  []torchCase `json:"cases"`
}

type torchCase struct {
	Name           string           `json:"name"` // family/case
	Op             string           `json:"op"`   // key of torchOps
	Params         torchParams      `json:"params"`
	Inputs         []torchInput     `json:"inputs"`
	TransposeInput []int            `json:"transpose_input"` // inputs fed as leaf.T()
	PermuteInput   map[string][]int `json:"permute_input"`   // input index → permutation fed
	Outputs        []torchArray     `json:"outputs"`
	Upstream       []*torchArray    `json:"upstream"` // per output; nil for int outputs
	Grads          []*torchArray    `json:"grads"`    // per input; nil where not differentiable
	Tol            float64          `json:"tol"`
	TolReason      string           `json:"tol_reason"`
	TorchF32       struct {
		Fwd  float64 `json:"fwd"`
		Grad float64 `json:"grad"`
	} `json:"torch_f32"` // PyTorch's own float32 distance from the reference
}

type torchInput struct {
	Name  string     `json:"name"`
	DType string     `json:"dtype"` // "float32" or "int32"
	Shape []int      `json:"shape"`
	Grad  bool       `json:"grad"` // the gradient is checked
	Data  torchFloat `json:"data"`
}

type torchArray struct {
	DType string     `json:"dtype"`
	Shape []int      `json:"shape"`
	Data  torchFloat `json:"data"`
}

// torchFloat is a flat list of numbers; non-finite values are written as
// the strings "inf", "-inf" and "nan".
type torchFloat []float64

func (f *torchFloat) UnmarshalJSON(b []byte) error {
	var raw []any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make([]float64, len(raw))
	for i, v := range raw {
		x, err := torchNumber(v)
		if err != nil {
			return fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = x
	}
	*f = out
	return nil
}

func torchNumber(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case string:
		switch x {
		case "inf":
			return math.Inf(1), nil
		case "-inf":
			return math.Inf(-1), nil
		case "nan":
			return math.NaN(), nil
		}
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

// torchParams are a case's op parameters (JSON numbers, lists, booleans).
type torchParams map[string]any

// torchFixtureError is the panic value for a malformed fixture.
type torchFixtureError string

func (p torchParams) has(k string) bool { _, ok := p[k]; return ok }

func (p torchParams) num(k string) float64 {
	v, ok := p[k]
	if !ok {
		panic(torchFixtureError("missing parameter " + k))
	}
	x, err := torchNumber(v)
	if err != nil {
		panic(torchFixtureError(fmt.Sprintf("parameter %s: %v", k, err)))
	}
	return x
}

func (p torchParams) int(k string) int {
	x := p.num(k)
	if x != math.Trunc(x) {
		panic(torchFixtureError(fmt.Sprintf("parameter %s = %v is not an integer", k, x)))
	}
	return int(x)
}

func (p torchParams) flag(k string) bool {
	b, ok := p[k].(bool)
	if !ok {
		panic(torchFixtureError("missing or non-boolean parameter " + k))
	}
	return b
}

// ints returns the integer list k, or nil if k is absent.
func (p torchParams) ints(k string) []int {
	v, ok := p[k]
	if !ok {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		panic(torchFixtureError("parameter " + k + " is not a list"))
	}
	out := make([]int, 0, len(l))
	for _, e := range l {
		x, ok := e.(float64)
		if !ok || x != math.Trunc(x) {
			panic(torchFixtureError(fmt.Sprintf("parameter %s holds %v, not an integer", k, e)))
		}
		out = append(out, int(x))
	}
	return out
}

// torchOp runs one op of the forge API on the inputs as fed (after any
// transpose or permutation) and returns its outputs.
type torchOp func(p torchParams, x []*forge.Tensor) []*forge.Tensor

func torchOne(t *forge.Tensor) []*forge.Tensor { return []*forge.Tensor{t} }

func torchUnary(f func(*forge.Tensor) *forge.Tensor) torchOp {
	return func(_ torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(f(x[0])) }
}

func torchScalar(f func(*forge.Tensor, float64) *forge.Tensor) torchOp {
	return func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(f(x[0], p.num("s"))) }
}

func torchBinary(f func(a, b *forge.Tensor) *forge.Tensor) torchOp {
	return func(_ torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(f(x[0], x[1])) }
}

// torchReduce maps sum/mean/max/min with optional axes (absent: all) and keep.
func torchReduce(drop, keep func(*forge.Tensor, ...int) *forge.Tensor) torchOp {
	return func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		if p.flag("keep") {
			return torchOne(keep(x[0], p.ints("axes")...))
		}
		return torchOne(drop(x[0], p.ints("axes")...))
	}
}

// torchOps maps the fixtures' op names to the forge API.
var torchOps = map[string]torchOp{
	// Creation (forward only).
	"arange": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Arange(p.num("start"), p.num("stop"), p.num("step")))
	},
	"arange_int": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor { return torchOne(forge.ArangeInt(p.int("n"))) },
	"full": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Full(p.num("value"), p.ints("shape")...))
	},
	"zeros": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Zeros(p.ints("shape")...))
	},
	"ones": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Ones(p.ints("shape")...))
	},
	"scalar":     func(p torchParams, _ []*forge.Tensor) []*forge.Tensor { return torchOne(forge.Scalar(p.num("value"))) },
	"zeros_like": torchUnary(forge.ZerosLike),
	"ones_like":  torchUnary(forge.OnesLike),
	"full_like": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.FullLike(x[0], p.num("value")))
	},
	"cast_int32":   torchUnary(func(x *forge.Tensor) *forge.Tensor { return x.Cast(forge.Int32) }),
	"cast_float32": torchUnary(func(x *forge.Tensor) *forge.Tensor { return x.Cast(forge.Float32) }),
	"full_of_int32": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.FullOf(forge.Int32, p.num("value"), p.ints("shape")...))
	},
	"zeros_of_int32": func(p torchParams, _ []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.ZerosOf(forge.Int32, p.ints("shape")...))
	},
	"copy_from": torchBinary((*forge.Tensor).CopyFrom), // in place into the fed tensor

	// Unary.
	"neg":        torchUnary((*forge.Tensor).Neg),
	"exp":        torchUnary((*forge.Tensor).Exp),
	"log":        torchUnary((*forge.Tensor).Log),
	"sqrt":       torchUnary((*forge.Tensor).Sqrt),
	"rsqrt":      torchUnary((*forge.Tensor).Rsqrt),
	"tanh":       torchUnary((*forge.Tensor).Tanh),
	"sigmoid":    torchUnary((*forge.Tensor).Sigmoid),
	"silu":       torchUnary((*forge.Tensor).SiLU),
	"softplus":   torchUnary((*forge.Tensor).Softplus),
	"gelu":       torchUnary((*forge.Tensor).GELU), // tanh approximation
	"gelu_exact": torchUnary((*forge.Tensor).GELUExact),
	"relu":       torchUnary((*forge.Tensor).ReLU),
	"abs":        torchUnary((*forge.Tensor).Abs),
	"square":     torchUnary((*forge.Tensor).Square),
	"sign":       torchUnary((*forge.Tensor).Sign),
	"round":      torchUnary((*forge.Tensor).Round),
	"pow_scalar": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].PowScalar(p.num("p"))) },
	"clamp": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Clamp(p.num("lo"), p.num("hi")))
	},
	"add_scalar":  torchScalar((*forge.Tensor).AddScalar),
	"sub_scalar":  torchScalar((*forge.Tensor).SubScalar),
	"mul_scalar":  torchScalar((*forge.Tensor).MulScalar),
	"div_scalar":  torchScalar((*forge.Tensor).DivScalar),
	"rsub_scalar": torchScalar((*forge.Tensor).RSubScalar),
	"rdiv_scalar": torchScalar((*forge.Tensor).RDivScalar),
	"rpow_scalar": torchScalar((*forge.Tensor).RPowScalar),

	// Binary, broadcasting.
	"add":      torchBinary((*forge.Tensor).Add),
	"sub":      torchBinary((*forge.Tensor).Sub),
	"mul":      torchBinary((*forge.Tensor).Mul),
	"div":      torchBinary((*forge.Tensor).Div),
	"pow":      torchBinary((*forge.Tensor).Pow),
	"maximum":  torchBinary((*forge.Tensor).Maximum),
	"minimum":  torchBinary((*forge.Tensor).Minimum),
	"mul_self": torchUnary(func(a *forge.Tensor) *forge.Tensor { return a.Mul(a) }),
	"eq":       torchBinary((*forge.Tensor).Eq),
	"ne":       torchBinary((*forge.Tensor).Ne),
	"lt":       torchBinary((*forge.Tensor).Lt),
	"le":       torchBinary((*forge.Tensor).Le),
	"gt":       torchBinary((*forge.Tensor).Gt),
	"ge":       torchBinary((*forge.Tensor).Ge),
	"where": func(_ torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Where(x[0], x[1], x[2]))
	},
	"masked_fill": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].MaskedFill(x[1], p.num("value")))
	},

	// Reductions.
	"sum":  torchReduce((*forge.Tensor).Sum, (*forge.Tensor).SumKeep),
	"mean": torchReduce((*forge.Tensor).Mean, (*forge.Tensor).MeanKeep),
	"max":  torchReduce((*forge.Tensor).Max, (*forge.Tensor).MaxKeep),
	"min":  torchReduce((*forge.Tensor).Min, (*forge.Tensor).MinKeep),
	"var": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		if p.has("correction") {
			if p.flag("keep") {
				panic(torchFixtureError("VarCorrection has no keep variant"))
			}
			return torchOne(x[0].VarCorrection(p.int("correction"), p.ints("axes")...))
		}
		return torchReduce((*forge.Tensor).Var, (*forge.Tensor).VarKeep)(p, x)
	},
	"argmax": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].ArgMax(p.int("axis"))) },
	"argmin": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].ArgMin(p.int("axis"))) },

	// Matmul.
	"matmul": torchBinary((*forge.Tensor).MatMul),

	// Movement and indexing.
	"reshape": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Reshape(p.ints("shape")...))
	},
	"view": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].View(p.ints("shape")...)) },
	"flatten": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Flatten(p.int("start"), p.int("end")))
	},
	"unsqueeze": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].Unsqueeze(p.int("axis"))) },
	"squeeze": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Squeeze(p.ints("axes")...))
	},
	"permute": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Permute(p.ints("perm")...))
	},
	"transpose": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Transpose(p.int("a"), p.int("b")))
	},
	"t": torchUnary((*forge.Tensor).T),
	"expand": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Expand(p.ints("shape")...))
	},
	"narrow": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Narrow(p.int("axis"), p.int("start"), p.int("length")))
	},
	"slice": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Slice(p.int("axis"), p.int("start"), p.int("end")))
	},
	"index": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Index(p.int("axis"), p.int("i")))
	},
	"contiguous": torchUnary((*forge.Tensor).Contiguous),
	"clone":      torchUnary((*forge.Tensor).Clone),
	"concat": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Concat(p.int("axis"), x...))
	},
	"concat_self": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		xs := make([]*forge.Tensor, p.int("n"))
		for i := range xs {
			xs[i] = x[0]
		}
		return torchOne(forge.Concat(p.int("axis"), xs...))
	},
	"stack": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.Stack(p.int("axis"), x...))
	},
	"split": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return x[0].Split(p.int("axis"), p.ints("sizes")...)
	},
	"chunk": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return x[0].Chunk(p.int("n"), p.int("axis")) },
	"index_select": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].IndexSelect(p.int("axis"), x[1]))
	},
	"index_add": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].IndexAdd(p.int("axis"), x[1], x[2]))
	},
	"gather": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].Gather(p.int("axis"), x[1]))
	},

	// Neural-network ops.
	"softmax": func(p torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(x[0].Softmax(p.int("axis"))) },
	"log_softmax": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(x[0].LogSoftmax(p.int("axis")))
	},
	"layer_norm": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		var w, b *forge.Tensor
		if len(x) > 1 {
			w = x[1]
		}
		if len(x) > 2 {
			b = x[2]
		}
		return torchOne(forge.LayerNorm(x[0], w, b, p.num("eps")))
	},
	"rms_norm": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		var w *forge.Tensor
		if len(x) > 1 {
			w = x[1]
		}
		return torchOne(forge.RMSNorm(x[0], w, p.num("eps")))
	},
	"embedding": func(_ torchParams, x []*forge.Tensor) []*forge.Tensor { return torchOne(forge.Embedding(x[0], x[1])) },
	"rope": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		if p.has("theta") {
			return torchOne(forge.RoPETheta(x[0], p.int("pos0"), p.num("theta")))
		}
		return torchOne(forge.RoPE(x[0], p.int("pos0")))
	},
	"attention": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		if p.has("scale") {
			return torchOne(forge.AttentionScaled(x[0], x[1], x[2], p.flag("causal"), p.num("scale")))
		}
		return torchOne(forge.Attention(x[0], x[1], x[2], p.flag("causal")))
	},
	"cross_entropy": func(p torchParams, x []*forge.Tensor) []*forge.Tensor {
		return torchOne(forge.CrossEntropy(x[0], x[1], p.int("ignore")))
	},
}

// torchLoad reads every embedded fixture file, in name order.
func torchLoad() ([]torchFile, error) {
	names, err := fs.Glob(torchFixtures, "testdata/torch/*.json")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, errors.New("no fixtures in testdata/torch (run `make golden`)")
	}
	sort.Strings(names)
	var files []torchFile
	for _, name := range names {
		b, err := torchFixtures.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var f torchFile
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// torchResult is the outcome of one case.
type torchResult struct {
	fwd, grad float64 // worst normalised differences; grad < 0 when not checked
	failure   string  // empty when the case passed
}

// TorchParity runs every PyTorch fixture case on dev (forward values and
// every input gradient) and fails each case that is off by more than its
// tolerance, that panics, or whose kernel the backend does not implement
// (naming the kernel).
// It logs one line per case, `ok   family/case  fwd maxdiff …  grad maxdiff …`,
// and a per-family summary of the worst differences.
func TorchParity(t *testing.T, dev *forge.Device) {
	t.Helper()
	files, err := torchLoad()
	if err != nil {
		t.Fatalf("torch fixtures: %v", err)
	}
	var prev *forge.Device // nil (the FORGE_BACKEND default) if none opens
	_ = forge.Try(func() { prev = forge.DefaultDevice() })
	forge.SetDefaultDevice(dev) // creation ops and FromSlice land on dev
	t.Cleanup(func() { forge.SetDefaultDevice(prev) })

	type summary struct {
		n, failed int
		fwd, grad float64
		fwdCase   string
		gradCase  string
	}
	sums := map[string]*summary{}
	var order []string
	for _, f := range files {
		s := &summary{grad: -1, fwdCase: "-", gradCase: "-"}
		sums[f.Family] = s
		order = append(order, f.Family)
		for i := range f.Cases {
			c := &f.Cases[i]
			t.Run(c.Name, func(t *testing.T) {
				r := torchRun(dev, c)
				s.n++
				if r.fwd > s.fwd {
					s.fwd, s.fwdCase = r.fwd, c.Name
				}
				if r.grad > s.grad {
					s.grad, s.gradCase = r.grad, c.Name
				}
				tol := ""
				if c.Tol != 0 && c.Tol != 1e-5 {
					tol = fmt.Sprintf("  (tol %.0e: %s)", c.Tol, c.TolReason)
				}
				if r.failure != "" {
					s.failed++
					t.Errorf("FAIL %-40s %s%s", c.Name, r.failure, tol)
					return
				}
				t.Logf("ok   %-40s fwd maxdiff %.1e  grad maxdiff %s%s", c.Name, r.fwd, torchGradText(r.grad), tol)
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "torch parity on %s, worst |got−want|/max(1,|want|) per family:\n", dev.Name())
	for _, fam := range order {
		s := sums[fam]
		if s.n == 0 {
			continue // filtered out by -run
		}
		status := "ok  "
		if s.failed > 0 {
			status = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %-14s %3d cases %3d failed  fwd %.1e (%s)  grad %s (%s)\n",
			status, fam, s.n, s.failed, s.fwd, s.fwdCase, torchGradText(s.grad), s.gradCase)
	}
	t.Log(b.String())
}

func torchGradText(g float64) string {
	if g < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1e", g)
}

// torchRun replays one case; every panic (a forge misuse error, a
// missing kernel, a bug) becomes a failure.
func torchRun(dev *forge.Device, c *torchCase) (res torchResult) {
	res.grad = -1
	stage := "setup"
	defer func() {
		if r := recover(); r != nil {
			res.failure = fmt.Sprintf("%s: %s", stage, torchPanic(r))
		}
	}()
	op, ok := torchOps[c.Op]
	if !ok {
		res.failure = fmt.Sprintf("the fixture's op %q has no forge mapping in torchOps", c.Op)
		return res
	}
	tol := c.Tol
	if tol == 0 {
		tol = 1e-5
	}

	// Inputs: contiguous leaves, fed transposed or permuted where the
	// fixture says so (the gradient is the leaf's).
	leaves := make([]*forge.Tensor, len(c.Inputs))
	fed := make([]*forge.Tensor, len(c.Inputs))
	for i, in := range c.Inputs {
		leaves[i] = torchTensor(dev, in.DType, in.Shape, in.Data)
		if in.Grad {
			leaves[i].RequiresGrad()
		}
		fed[i] = leaves[i]
		if slices.Contains(c.TransposeInput, i) {
			fed[i] = fed[i].T()
		}
		if perm, ok := c.PermuteInput[strconv.Itoa(i)]; ok {
			fed[i] = fed[i].Permute(slices.Clone(perm)...)
		}
	}

	stage = "forward"
	outs := op(c.Params, fed)
	if len(outs) != len(c.Outputs) {
		res.failure = fmt.Sprintf("forward: %d outputs, want %d", len(outs), len(c.Outputs))
		return res
	}
	for i, want := range c.Outputs {
		name := "output"
		if len(outs) > 1 {
			name = fmt.Sprintf("output %d", i)
		}
		d, msg := torchCompare(name, outs[i], want, tol)
		res.fwd = max(res.fwd, d)
		if msg != "" {
			res.failure = "forward: " + msg + torchNote(c)
			return res
		}
	}
	if len(c.Grads) == 0 {
		return res
	}

	stage = "backward"
	if len(outs) == 1 {
		if !outs[0].RequiresGradFlag() {
			res.failure = "backward: the output does not require a gradient"
			return res
		}
		outs[0].Backward(torchTensor(dev, "float32", c.Upstream[0].Shape, c.Upstream[0].Data))
	} else {
		var loss *forge.Tensor // Σ sum(outᵢ·Rᵢ)
		for i, o := range outs {
			if c.Upstream[i] == nil {
				continue
			}
			term := o.Mul(torchTensor(dev, "float32", c.Upstream[i].Shape, c.Upstream[i].Data)).Sum()
			if loss == nil {
				loss = term
			} else {
				loss = loss.Add(term)
			}
		}
		loss.Backward()
	}
	res.grad = 0
	for i, want := range c.Grads {
		if want == nil {
			continue
		}
		name := "grad " + c.Inputs[i].Name
		g := leaves[i].Grad()
		if g == nil {
			if torchAllZero(want.Data) {
				continue // torch's gradient is zero; forge may leave it unset
			}
			res.failure = "backward: " + name + " is nil"
			return res
		}
		d, msg := torchCompare(name, g, *want, tol)
		res.grad = max(res.grad, d)
		if msg != "" {
			res.failure = "backward: " + msg + torchNote(c)
			return res
		}
	}
	return res
}

func torchNote(c *torchCase) string {
	return fmt.Sprintf(" (torch float32 itself: fwd %.1e, grad %.1e)", c.TorchF32.Fwd, c.TorchF32.Grad)
}

func torchAllZero(v []float64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

// torchTensor makes a contiguous tensor on dev from fixture data (0-d when
// shape is empty).
func torchTensor(dev *forge.Device, dtype string, shape []int, data []float64) *forge.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != len(data) {
		panic(torchFixtureError(fmt.Sprintf("shape %v holds %d values, data has %d", shape, n, len(data))))
	}
	var host any
	switch dtype {
	case "float32":
		v := make([]float32, len(data))
		for i, x := range data {
			v[i] = float32(x) // exact: the fixtures hold float32 values
		}
		host = v
	case "int32":
		v := make([]int32, len(data))
		for i, x := range data {
			v[i] = int32(x)
		}
		host = v
	default:
		panic(torchFixtureError("unknown dtype " + dtype))
	}
	var x *forge.Tensor
	if len(shape) == 0 {
		x = forge.FromSlice(host, 1).Reshape()
	} else {
		x = forge.FromSlice(host, shape...)
	}
	return x.To(dev)
}

// torchCompare checks got against want and returns the worst normalised
// difference and, if the check fails, a message naming the first element
// beyond tolerance.
func torchCompare(name string, got *forge.Tensor, want torchArray, tol float64) (float64, string) {
	if !slices.Equal(got.Shape(), want.Shape) {
		return math.Inf(1), fmt.Sprintf("%s has shape %v, want %v", name, got.Shape(), want.Shape)
	}
	wantInt := want.DType == "int32"
	if (got.DType() == forge.Int32) != wantInt {
		return math.Inf(1), fmt.Sprintf("%s has dtype %v, want %s", name, got.DType(), want.DType)
	}
	g := got.Float64s()
	worst, bad := 0.0, -1
	for i, w := range want.Data {
		var d float64
		switch {
		case wantInt:
			if g[i] != w {
				d = math.Inf(1)
			}
		case math.IsNaN(w):
			if !math.IsNaN(g[i]) {
				d = math.Inf(1)
			}
		case math.IsInf(w, 0):
			if g[i] != w {
				d = math.Inf(1)
			}
		default:
			d = math.Abs(g[i]-w) / max(1, math.Abs(w))
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
		}
		if d > worst {
			worst = d
		}
		if d > tol && bad < 0 {
			bad = i
		}
	}
	if bad >= 0 {
		return worst, fmt.Sprintf("%s maxdiff %.2e > tol %.0e; first at %v: got %.9g, want %.9g",
			name, worst, tol, torchUnravel(bad, want.Shape), g[bad], want.Data[bad])
	}
	return worst, ""
}

// torchUnravel turns a flat row-major index into a multi-index.
func torchUnravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		if shape[k] > 0 {
			idx[k] = i % shape[k]
			i /= shape[k]
		}
	}
	return idx
}

// torchPanic names a missing kernel plainly, shows a forge error as its
// message, and anything else with its stack.
func torchPanic(r any) string {
	if e, ok := r.(error); ok {
		var ni backend.ErrNotImplemented
		if errors.As(e, &ni) {
			return fmt.Sprintf("kernel %s is not implemented on backend %s", ni.Kernel, ni.Backend)
		}
		var fe *forge.Error
		if errors.As(e, &fe) {
			return fe.Error()
		}
	}
	if fe, ok := r.(torchFixtureError); ok {
		return "bad fixture: " + string(fe)
	}
	return fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
}
