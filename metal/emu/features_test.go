package emu

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/metal/driver"
)

// TestFunctionConstants: the pipeline key's constants change what the
// kernel computes, including is_function_constant_defined.
func TestFunctionConstants(t *testing.T) {
	d := testDriver(t)
	const n = 16
	cases := []struct {
		consts []driver.Constant
		f      func(float32) float32
	}{
		{[]driver.Constant{{Index: 0, Type: driver.Bool, Bits: 0}, {Index: 7, Type: driver.UInt32, Bits: 0}}, func(x float32) float32 { return x }},
		{[]driver.Constant{{Index: 0, Type: driver.Bool, Bits: 1}, {Index: 7, Type: driver.UInt32, Bits: 0}}, func(x float32) float32 { return x * x }},
		{[]driver.Constant{{Index: 0, Type: driver.Bool, Bits: 0}, {Index: 1, Type: driver.Float32, Bits: math.Float32bits(2.5)}, {Index: 7, Type: driver.UInt32, Bits: 1}}, func(x float32) float32 { return 2.5 * x }},
		{[]driver.Constant{{Index: 0, Type: driver.Bool, Bits: 1}, {Index: 7, Type: driver.UInt32, Bits: 2}}, func(x float32) float32 { return -x * x }},
		{[]driver.Constant{{Index: 7, Type: driver.UInt32, Bits: 3}, {Index: 0, Type: driver.Bool, Bits: 0}}, func(x float32) float32 { return x }},
	}
	// Encode all specialisations into one command buffer: each dispatch
	// must see its own constants.
	cb := d.NewCommandBuffer()
	outs := make([]driver.Buffer, len(cases))
	for i, c := range cases {
		outs[i] = f32buf(t, d, make([]float32, n))
		cb.Encode(dispatch(pipe(t, d, "fc_kernel", c.consts...), [3]int{1, 1, 1}, [3]int{n, 1, 1}, bufArg(outs[i])))
	}
	cb.Commit()
	if err := cb.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		for j, v := range f32s(outs[i]) {
			if want := c.f(float32(j)); v != want {
				t.Fatalf("case %d (%v): out[%d] = %v, want %v", i, c.consts, j, v, want)
			}
		}
	}
	// A constant set with the wrong type is an error naming the declaration.
	_, err := d.Pipeline(driver.PipelineKey{Kernel: "fc_kernel", Constants: []driver.Constant{{Index: 0, Type: driver.Bool}, {Index: 7, Type: driver.UInt32}, {Index: 1, Type: driver.UInt32, Bits: 1}}})
	if err == nil || !strings.Contains(err.Error(), "consts.metal:6") {
		t.Errorf("wrong constant type: err = %v", err)
	}
	if _, err := d.Pipeline(driver.PipelineKey{Kernel: "no_such_kernel"}); err == nil {
		t.Error("unknown kernel: no error")
	}
}

// TestTemplateInstances: [[host_name]] instantiations of a template kernel.
func TestTemplateInstances(t *testing.T) {
	d := testDriver(t)
	out := f32buf(t, d, make([]float32, 8))
	if err := run(d, pipe(t, d, "fill_t_f32"), [3]int{1, 1, 1}, [3]int{8, 1, 1}, bufArg(out), bytesArg(f32bytes(1.5))); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32s(out) {
		if v != 1.5+float32(i) {
			t.Fatalf("fill_t_f32: out[%d] = %v", i, v)
		}
	}
	if err := run(d, pipe(t, d, "fill_t_i32"), [3]int{1, 1, 1}, [3]int{8, 1, 1}, bufArg(out), bytesArg(f32bytes(2.7))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if v := int32(binary.LittleEndian.Uint32(out.Bytes()[4*i:])); v != int32(2+i) {
			t.Fatalf("fill_t_i32: out[%d] = %v", i, v)
		}
	}
	ks, err := ParseKernels("consts.metal", testSources(t)["consts.metal"])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range ks {
		names = append(names, k.Name)
	}
	if got := strings.Join(names, ","); got != "fc_kernel,fill_t_f32,fill_t_i32,atomics,add_bias" {
		t.Errorf("kernels: %s", got)
	}
}

// TestAtomics: device atomics from many threadgroups on several workers.
func TestAtomics(t *testing.T) {
	d := testDriver(t)
	count, _ := d.NewBuffer(4)
	sum, _ := d.NewBuffer(4)
	mx, _ := d.NewBuffer(4)
	const groups, tg = 64, 64
	if err := run(d, pipe(t, d, "atomics"), [3]int{groups, 1, 1}, [3]int{tg, 1, 1}, bufArg(count), bufArg(sum), bufArg(mx)); err != nil {
		t.Fatal(err)
	}
	c := binary.LittleEndian.Uint32(count.Bytes())
	s := math.Float32frombits(binary.LittleEndian.Uint32(sum.Bytes()))
	m := binary.LittleEndian.Uint32(mx.Bytes())
	if c != groups*tg || s != 0.5*groups*tg || m != groups*tg-1 {
		t.Errorf("count %d sum %v max %d, want %d %v %d", c, s, m, groups*tg, 0.5*groups*tg, groups*tg-1)
	}
}

// TestThreadgroupMemory: odd sizes and types, alignment and the 0xFF fill.
func TestThreadgroupMemory(t *testing.T) {
	d := testDriver(t)
	withSchedules(d, func(sched string) {
		out := f32buf(t, d, make([]float32, 8))
		if err := run(d, pipe(t, d, "tg_odd"), [3]int{2, 1, 1}, [3]int{17, 1, 1}, bufArg(out)); err != nil {
			t.Fatal(err)
		}
		got := f32s(out)
		want := []float32{1, 1, 6, 15, 21, 6, 105}
		for i, w := range want {
			if got[i] != w {
				t.Fatalf("%s: out[%d] = %v, want %v (all: %v)", sched, i, got[i], w, got)
			}
		}
	})
	// (tg_too_big's pipeline is refused: TestThreadgroupMemoryLimit.)
}

// TestDispatchErrors: unbound arguments and oversized threadgroups are
// reported by Wait.
func TestDispatchErrors(t *testing.T) {
	d := testDriver(t)
	p := pipe(t, d, "add_scaled")
	out := f32buf(t, d, make([]float32, 4))
	if err := run(d, p, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Errorf("missing args: %v", err)
	}
	if err := run(d, p, [3]int{1, 1, 1}, [3]int{1025, 1, 1}, bufArg(out), bufArg(out), bufArg(out), bytesArg(u32bytes(0, 0))); err == nil {
		t.Error("1025 threads: no error")
	}
}

// TestCompileErrorLine: a compile error names the .metal file and line.
func TestCompileErrorLine(t *testing.T) {
	if _, _, err := findClang(); err != nil {
		t.Skip(err)
	}
	src := "#include <metal_stdlib>\nusing namespace metal;\n\nkernel void k(device float* x [[buffer(0)]],\n              uint i [[thread_position_in_grid]]) {\n    threadgroup float* t = x;  // device → threadgroup: an error\n}\n"
	_, err := Open(map[string]string{"bad.metal": src}, Options{CacheDir: t.TempDir()})
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "bad.metal:6:") {
		t.Errorf("error does not name bad.metal:6: %v", err)
	}
}

// TestUnknownAttribute: a misspelt built-in is rejected with file:line.
func TestUnknownAttribute(t *testing.T) {
	src := "kernel void k(device float* x [[buffer(0)]],\n              uint i [[thread_postion_in_grid]]) {\n    x[i] = 0;\n}\n"
	_, err := ParseKernels("typo.metal", src)
	if err == nil || !strings.Contains(err.Error(), "typo.metal:2:") || !strings.Contains(err.Error(), "thread_postion_in_grid") {
		t.Errorf("err = %v", err)
	}
	if _, err := Open(map[string]string{"typo.metal": src}, Options{CacheDir: t.TempDir()}); err == nil {
		t.Error("Open accepted the typo")
	}
	ks, err := ParseKernels("ok.metal", strings.Replace(src, "postion", "position", 1))
	if err != nil || len(ks) != 1 || ks[0].Buffers() != 1 || ks[0].Params[1].Builtin != "thread_position_in_grid" || ks[0].Params[0].AddressSpace != "device" {
		t.Errorf("ParseKernels = %+v, %v", ks, err)
	}
}

// TestNoClang: without clang the error says what to install.
func TestNoClang(t *testing.T) {
	_, _, err := locateClang("", t.TempDir(), "linux")
	if err == nil || !strings.Contains(err.Error(), "apt-get install clang-19") {
		t.Errorf("linux: %v", err)
	}
	_, _, err = locateClang("", t.TempDir(), "darwin")
	if err == nil || !strings.Contains(err.Error(), "xcode-select --install") {
		t.Errorf("darwin: %v", err)
	}
	_, _, err = locateClang("/no/such/clang++", "", "linux")
	if err == nil || !strings.Contains(err.Error(), "FORGE_EMU_CLANG") {
		t.Errorf("override: %v", err)
	}
}

// TestOptionalBuffer: [[buffer(n), function_constant(name)]] need not be
// bound when the constant is off.
func TestOptionalBuffer(t *testing.T) {
	d := testDriver(t)
	out := f32buf(t, d, make([]float32, 4))
	off := pipe(t, d, "add_bias", driver.Constant{Index: 3, Type: driver.Bool, Bits: 0})
	if err := run(d, off, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out); got[0] != -1 {
		t.Errorf("without bias: %v", got)
	}
	on := pipe(t, d, "add_bias", driver.Constant{Index: 3, Type: driver.Bool, Bits: 1})
	if err := run(d, on, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err == nil {
		t.Error("bias on but unbound: no error")
	}
	bias := f32buf(t, d, []float32{1, 2, 3, 4})
	if err := run(d, on, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out), bufArg(bias)); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out); got[3] != 4 {
		t.Errorf("with bias: %v", got)
	}
}

// TestNamedIndices: buffer and function-constant indices given by
// #define, enumerators and constexpr constants.
func TestNamedIndices(t *testing.T) {
	src := `#define BUF_OUT 2
enum : uint { BUF_A = 0, BUF_B, FC_MODE = 9 };
constant constexpr uint BUF_P = 3;
constant uint mode [[function_constant(FC_MODE)]];
kernel void k(device const float* a [[buffer(BUF_A)]],
              device const float* b [[buffer(BUF_B)]],
              device float* out [[buffer(BUF_OUT)]],
              constant uint& n [[buffer(BUF_P)]],
              uint i [[thread_position_in_grid]]) {
    out[i] = a[i] + b[i];
}
`
	ks, err := ParseKernels("named.metal", src)
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, p := range ks[0].Params {
		idx = append(idx, p.BufferIndex)
	}
	if fmt.Sprint(idx) != "[0 1 2 3 -1]" {
		t.Errorf("buffer indices %v", idx)
	}
	fi, err := analyze("named.metal", src)
	if err != nil || len(fi.consts) != 1 || fi.consts[0].Index != 9 {
		t.Errorf("function constants %+v, %v", fi, err)
	}
}

// TestKernelPrototype: a kernel declared before its definition is one
// kernel.
func TestKernelPrototype(t *testing.T) {
	src := "kernel void k(device float* x [[buffer(0)]]);\nkernel void k(device float* x [[buffer(0)]]) { x[0] = 1; }\n"
	ks, err := ParseKernels("proto.metal", src)
	if err != nil || len(ks) != 1 || ks[0].Line != 2 {
		t.Errorf("ParseKernels = %+v, %v", ks, err)
	}
}

// TestParseDetails: #if 0 blocks are skipped, duplicate buffer indices
// are rejected.
func TestParseDetails(t *testing.T) {
	src := "#if 0\nkernel void k(device float* x [[buffer(0)]]) {}\n#else\nkernel void k(device float* y [[buffer(0)]]) {}\n#endif\n"
	ks, err := ParseKernels("ifzero.metal", src)
	if err != nil || len(ks) != 1 || ks[0].Params[0].Name != "y" || ks[0].Line != 4 {
		t.Errorf("#if 0: %+v, %v", ks, err)
	}
	_, err = ParseKernels("dup.metal", "kernel void k(device float* x [[buffer(1)]],\n device float* y [[buffer(1)]]) {}\n")
	if err == nil || !strings.Contains(err.Error(), "dup.metal:2") {
		t.Errorf("duplicate index: %v", err)
	}
}

// TestParamSizes: bytes bound to a `constant T&` parameter must cover
// sizeof(T) (a Go/MSL struct layout mismatch is caught, not read past).
func TestParamSizes(t *testing.T) {
	d := testDriver(t)
	p := pipe(t, d, "add_scaled")
	a := f32buf(t, d, make([]float32, 4))
	err := run(d, p, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(a), bufArg(a), bufArg(a), bytesArg(u32bytes(4)))
	if err == nil || !strings.Contains(err.Error(), "needs 8 bytes, 4 bytes are bound") {
		t.Errorf("short bytes: %v", err)
	}
	small, _ := d.NewBuffer(4)
	err = run(d, p, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(a), bufArg(a), bufArg(a), bufArg(small))
	if err == nil || !strings.Contains(err.Error(), "needs 8 bytes") {
		t.Errorf("short buffer: %v", err)
	}
}
