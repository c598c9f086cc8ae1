package emu

import (
	"strings"
	"testing"
	"time"
)

// TestFaults: a kernel that writes past the end of a buffer, overflows its
// stack or divides by zero fails its command buffer with an error that
// says so, and the driver keeps working.
func TestFaults(t *testing.T) {
	d := testDriver(t)
	out := f32buf(t, d, make([]float32, 1024))
	err := run(d, pipe(t, d, "oob_write"), [3]int{1, 1, 1}, [3]int{1025, 1, 1}, bufArg(out), bytesArg(u32bytes(1024)))
	if err == nil {
		// 1025 threads exceed the threadgroup limit; use 2 groups instead.
		t.Fatal("no error")
	}
	err = run(d, pipe(t, d, "oob_write"), [3]int{2, 1, 1}, [3]int{1024, 1, 1}, bufArg(out), bytesArg(u32bytes(1024)))
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "SIGSEGV") || !strings.Contains(err.Error(), "0 bytes past the end of [[buffer(0)]] out") {
		t.Errorf("out-of-bounds write: err = %v", err)
	}
	err = run(d, pipe(t, d, "stack_hog"), [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out))
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "stack overflow") {
		t.Errorf("stack overflow: err = %v", err)
	}
	err = run(d, pipe(t, d, "int_div"), [3]int{1, 1, 1}, [3]int{4, 1, 1}, bufArg(out), bytesArg(u32bytes(0)))
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "SIGFPE") {
		t.Errorf("division by zero: err = %v", err)
	}
	// Still working.
	TestAddScaled(t)
	// A Go nil dereference still panics normally (the handler forwards
	// faults on Go threads to Go's handler).
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("no panic from a nil dereference")
			}
		}()
		var p *int
		_ = *p
	}()
}

// TestWatchdog: a kernel that never ends fails after the timeout instead
// of hanging, and the driver keeps working.
func TestWatchdog(t *testing.T) {
	d := testDriver(t)
	d.SetTimeout(300 * time.Millisecond)
	defer d.SetTimeout(0)
	out := f32buf(t, d, make([]float32, 256))
	start := time.Now()
	err := run(d, pipe(t, d, "spin"), [3]int{4, 1, 1}, [3]int{64, 1, 1}, bufArg(out), bytesArg(u32bytes(1)))
	t.Logf("%v after %v", err, time.Since(start))
	if err == nil || !strings.Contains(err.Error(), "watchdog") {
		t.Fatalf("err = %v", err)
	}
	if err := run(d, pipe(t, d, "spin"), [3]int{4, 1, 1}, [3]int{64, 1, 1}, bufArg(out), bytesArg(u32bytes(0))); err != nil {
		t.Fatal(err)
	}
	TestAddScaled(t)
}
