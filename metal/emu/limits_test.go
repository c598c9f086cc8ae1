package emu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/forgeml/forge/metal/driver"
)

// TestDeclaredMaxThreads: [[max_total_threads_per_threadgroup(N)]] is the
// pipeline's MaxThreads, and a dispatch of more threads fails like Metal.
func TestDeclaredMaxThreads(t *testing.T) {
	d := testDriver(t)
	for _, c := range []struct {
		kernel string
		max    int
	}{{"capped", 128}, {"capped_kernel_form", 96}, {"fill_t_f32", MaxThreads}} {
		p := pipe(t, d, c.kernel)
		if p.MaxThreads() != c.max {
			t.Errorf("%s: MaxThreads() = %d, want %d", c.kernel, p.MaxThreads(), c.max)
		}
	}
	p := pipe(t, d, "capped")
	out := f32buf(t, d, make([]float32, 256))
	if err := run(d, p, [3]int{2, 1, 1}, [3]int{128, 1, 1}, bufArg(out)); err != nil {
		t.Fatalf("128 threads: %v", err)
	}
	err := run(d, p, [3]int{1, 1, 1}, [3]int{16, 16, 1}, bufArg(out))
	if err == nil || !strings.Contains(err.Error(), "256 threads exceeds the pipeline's maximum 128") || !strings.Contains(err.Error(), "capped") {
		t.Errorf("256 threads on a 128-thread pipeline: err = %v", err)
	}
}

// TestMaxThreadsOption: Options and $FORGE_EMU_MAX_THREADS lower the
// maximum of every pipeline or of named kernels.
func TestMaxThreadsOption(t *testing.T) {
	testDriver(t) // skips without clang
	d, err := Open(testSources(t), Options{Threads: 2, MaxThreads: 256, KernelMaxThreads: map[string]int{"fill_t_i32": 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for kernel, want := range map[string]int{"fill_t_i32": 64, "capped": 128, "fill_t_f32": 256} {
		if got := pipe(t, d, kernel).MaxThreads(); got != want {
			t.Errorf("%s: MaxThreads() = %d, want %d", kernel, got, want)
		}
	}
	out := f32buf(t, d, make([]float32, 128))
	if err := run(d, pipe(t, d, "fill_t_i32"), [3]int{1, 1, 1}, [3]int{128, 1, 1}, bufArg(out), bytesArg(f32bytes(1))); err == nil {
		t.Error("128 threads on a pipeline lowered to 64 ran")
	}

	t.Setenv("FORGE_EMU_MAX_THREADS", "512,capped=32")
	d2, err := Open(testSources(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	for kernel, want := range map[string]int{"capped": 32, "fill_t_f32": 512} {
		if got := pipe(t, d2, kernel).MaxThreads(); got != want {
			t.Errorf("env: %s: MaxThreads() = %d, want %d", kernel, got, want)
		}
	}
	for _, bad := range []string{"100", "16", "2048", "x", "capped=", "nosuchkernel=64"} {
		t.Setenv("FORGE_EMU_MAX_THREADS", bad)
		if _, err := Open(testSources(t), Options{Threads: 2}); err == nil || !strings.Contains(err.Error(), "FORGE_EMU_MAX_THREADS") && !strings.Contains(err.Error(), "nosuchkernel") {
			t.Errorf("FORGE_EMU_MAX_THREADS=%s: err = %v", bad, err)
		}
	}
}

// TestRequiredFunctionConstants: a pipeline that leaves a function constant
// the kernel reads unset is refused, naming the kernel and the constant;
// constants tested with is_function_constant_defined or only gating an
// optional buffer may stay unset.
func TestRequiredFunctionConstants(t *testing.T) {
	d := testDriver(t)
	req := driver.Constant{Index: 0, Type: driver.UInt32, Bits: 5}
	src := driver.Constant{Index: 3, Type: driver.UInt32, Bits: 1}
	for _, c := range []struct {
		consts  []driver.Constant
		missing string // "" = accepted
	}{
		{nil, "lim_req"},
		{[]driver.Constant{src}, "lim_req"}, // through lim_helper
		{[]driver.Constant{req}, "lim_src"}, // through lim_twice
		{[]driver.Constant{req, src}, ""},
	} {
		_, err := d.Pipeline(driver.PipelineKey{Kernel: "fc_required", Constants: c.consts})
		switch {
		case c.missing == "" && err != nil:
			t.Errorf("%v: %v", c.consts, err)
		case c.missing != "" && (err == nil || !strings.Contains(err.Error(), "kernel fc_required reads function constant "+c.missing+" (limits.metal:")):
			t.Errorf("%v: err = %v, want one naming %s", c.consts, err, c.missing)
		}
	}
	if _, err := d.Pipeline(driver.PipelineKey{Kernel: "fc_unused"}); err != nil {
		t.Errorf("a kernel reading no constant: %v", err)
	}
	p := pipe(t, d, "fc_required", req, src)
	out := f32buf(t, d, make([]float32, 4))
	if err := run(d, p, [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out); got[3] != 3+5+2 {
		t.Errorf("out = %v, want [7 8 9 10]", got)
	}
}

// TestThreadgroupMemoryLimit: a kernel whose threadgroup declarations
// exceed Metal's 32 KB is refused when its pipeline is created, naming the
// kernel, the bytes and the limit — per template instantiation, with the
// arena's 16-byte alignment between declarations.
func TestThreadgroupMemoryLimit(t *testing.T) {
	d := testDriver(t)
	for _, c := range []struct {
		kernel string
		bytes  int // 0: fits
	}{{"tg_fits", 0}, {"tg_over_by_pad", 32784}, {"tg_over", 65552}, {"tg_too_big", 36000}, {"tg_odd", 0}} {
		_, err := d.Pipeline(driver.PipelineKey{Kernel: c.kernel})
		if c.bytes == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.kernel, err)
			}
			continue
		}
		want := fmt.Sprintf("kernel %s declares %d bytes of threadgroup memory, more than Metal's 32768", c.kernel, c.bytes)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.kernel, err, want)
		}
	}
	out := f32buf(t, d, make([]float32, 64))
	if err := run(d, pipe(t, d, "tg_fits"), [3]int{1, 1, 1}, [3]int{64, 1, 1}, bufArg(out)); err != nil {
		t.Fatal(err)
	}
	if got := f32s(out); got[63] != 64 {
		t.Errorf("tg_fits: out[63] = %v, want 64", got[63])
	}
}

// TestUnsetFunctionConstantRead: a read of an unset constant that the
// pipeline check cannot see fails the dispatch, naming the constant.
func TestUnsetFunctionConstantRead(t *testing.T) {
	d := testDriver(t)
	out := f32buf(t, d, make([]float32, 4))
	err := run(d, pipe(t, d, "fc_hidden"), [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out))
	if err == nil || !strings.Contains(err.Error(), "function constant lim_hidden (index 4) is read, but the pipeline does not set it") {
		t.Errorf("unset constant read: err = %v", err)
	}
	if err := run(d, pipe(t, d, "fc_hidden", driver.Constant{Index: 4, Type: driver.UInt32, Bits: 9}), [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out)); err != nil {
		t.Errorf("set: %v", err)
	}
}
