//go:build darwin && arm64

package metal

// Tests of the Metal driver on a Mac (make test-metal). They use a kernel
// source of their own, so they check the driver and the runtime above it,
// not Forge's kernels.

import (
	"strings"
	"testing"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

const testSource = `#include <metal_stdlib>
using namespace metal;

constant uint add_amount [[function_constant(0)]];
constant bool add_twice [[function_constant(1)]];

struct AddParams {
    uint n;
    float scale;
};

kernel void test_add(device uint* x [[buffer(0)]],
                     constant AddParams& p [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
    if (i < p.n) {
        x[i] += add_amount * (add_twice ? 2 : 1);
    }
}

kernel void test_scale(device float* y [[buffer(0)]],
                       device const float* x [[buffer(1)]],
                       constant AddParams& p [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
    if (i < p.n) {
        y[i] = x[i] * p.scale;
    }
}
`

const brokenSource = `#include <metal_stdlib>
using namespace metal;

kernel void test_broken(device float* y [[buffer(0)]]) {
    y[0] = undeclared_name;
}
`

func openTestMetal(t *testing.T) *Backend {
	t.Helper()
	drv, err := openMetal(map[string]string{"test.metal": testSource, "broken.metal": brokenSource})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	t.Logf("device: %s", drv.Device())
	return New(drv)
}

type addParams struct {
	N     uint32
	Scale float32
}

func TestMetalDriver(t *testing.T) {
	b := openTestMetal(t)
	const n = 1000
	x := b.Alloc(backend.Int32, n)
	host := make([]int32, n)
	for i := range host {
		host[i] = int32(i)
	}
	b.Write(x, host)
	key := func(amount uint32, twice bool) driver.PipelineKey {
		tw := uint32(0)
		if twice {
			tw = 1
		}
		return driver.PipelineKey{Kernel: "test_add", Constants: []driver.Constant{
			{Index: 0, Type: driver.UInt32, Bits: amount}, {Index: 1, Type: driver.Bool, Bits: tw}}}
	}
	groups := [3]int{(n + 255) / 256, 1, 1}
	threads := [3]int{256, 1, 1}
	xv := backend.View{Buf: x, Shape: []int{n}, Strides: []int{1}}
	b.run("test_add", key(3, false), groups, threads, b.arg(xv), bytesArg(addParams{N: n}))
	b.run("test_add", key(5, true), groups, threads, b.arg(xv), bytesArg(addParams{N: n}))
	got := make([]int32, n)
	b.Read(x, got)
	for i, v := range got {
		if v != int32(i)+13 {
			t.Fatalf("x[%d] = %d, want %d", i, v, i+13)
		}
	}
	if st := b.StreamStats(); st.CommandBuffers != 1 || st.Dispatches != 2 {
		t.Fatalf("stream: %+v", st)
	}
	p := b.pipelineFor(key(3, false))
	if p.MaxThreads() < 256 || p.SIMDWidth() != 32 {
		t.Fatalf("pipeline limits: max %d, simd %d", p.MaxThreads(), p.SIMDWidth())
	}

	// A view offset becomes a byte offset of the binding.
	y := b.Alloc(backend.Float32, n)
	xf := b.Alloc(backend.Float32, n)
	hf := make([]float32, n)
	for i := range hf {
		hf[i] = float32(i)
	}
	b.Write(xf, hf)
	yv := backend.View{Buf: y, Shape: []int{n}, Strides: []int{1}}
	xo := backend.View{Buf: xf, Offset: 10, Shape: []int{n - 10}, Strides: []int{1}}
	d, ok := b.TimeKernels(func() {
		b.run("test_scale", driver.PipelineKey{Kernel: "test_scale"}, groups, threads,
			b.arg(yv), b.arg(xo), bytesArg(addParams{N: n - 10, Scale: 0.5}))
	})
	if !ok || d <= 0 {
		t.Fatalf("GPU time %v, %v", d, ok)
	}
	t.Logf("test_scale: %v on the GPU", d)
	gf := make([]float32, n)
	b.Read(y, gf)
	if gf[0] != 5 || gf[n-11] != float32(n-1)/2 {
		t.Fatalf("y = %v … %v", gf[0], gf[n-11])
	}

	// A compile error names the file and line.
	msg := mustPanic(t, func() { b.pipelineFor(driver.PipelineKey{Kernel: "test_broken"}) })
	if !strings.Contains(msg, "broken.metal:5") || !strings.Contains(msg, "undeclared_name") {
		t.Fatalf("compile error: %s", msg)
	}
	msg = mustPanic(t, func() { b.pipelineFor(driver.PipelineKey{Kernel: "no_such_kernel"}) })
	if !strings.Contains(msg, "no_such_kernel") {
		t.Fatalf("missing kernel: %s", msg)
	}
}

// TestMetalForgeKernelsCompile compiles every embedded kernel source file.
// The MSL 4.0 tensor-op files must compile where the GPU runs them only as
// far as the backend relies on it: their failure turns the matmul2d
// variant off, so it is logged, not failed (a macOS 26.0 SDK lacks the
// float32 and bfloat16 operand types, say).
func TestMetalForgeKernelsCompile(t *testing.T) {
	drv, err := openGPU()
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	md := drv.(*metalDriver)
	files := map[string]bool{}
	for _, f := range md.index {
		files[f] = true
	}
	for f := range files {
		_, err := md.library(f)
		switch {
		case err == nil:
		case driver.UsesTensorOps(md.sources[f]):
			t.Logf("%s (tensor ops: %v): %v — matmul2d is off on this Mac", f, md.TensorOps(), err)
		default:
			t.Error(err)
		}
	}
}
