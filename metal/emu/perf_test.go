package emu

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSwitchCost reports the cost of one fiber context switch.
func TestSwitchCost(t *testing.T) {
	d := testDriver(t)
	c := d.SwitchCost()
	t.Logf("fiber switch: %.1f ns (one direction, hot caches)", d.lib.switchCost(2_000_000))
	if c <= 0 || c > 5000 {
		t.Errorf("implausible switch cost %v", c)
	}
}

// TestAArch64Switch runs the AArch64 context switch under qemu-aarch64
// (when qemu-user and lld are installed): two fibers ping-pong with the
// main context with callee-saved integer and FP registers live.
func TestAArch64Switch(t *testing.T) {
	clang, _, err := findClang()
	if err != nil {
		t.Skip(err)
	}
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		t.Skip("qemu-aarch64 not installed (apt-get install qemu-user)")
	}
	lld := ""
	for _, n := range []string{"ld.lld-19", "ld.lld"} {
		if p, err := exec.LookPath(n); err == nil {
			lld = p
			break
		}
	}
	if lld == "" {
		t.Skip("ld.lld not installed (apt-get install lld-19)")
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "t.o"), filepath.Join(dir, "t")
	out, err := exec.Command(clang, "--target=aarch64-linux-gnu", "-O2", "-ffreestanding", "-fno-exceptions", "-fno-rtti",
		"-I", "runtime", "-c", "testdata/switch_aarch64.cpp", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	if out, err := exec.Command(lld, "-static", "-e", "_start", obj, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("link: %v\n%s", err, out)
	}
	err = exec.Command(qemu, bin).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 42 {
		t.Fatalf("the AArch64 switch check failed: %v", err)
	}
}

// TestElementwiseThroughput reports the time of an elementwise kernel over
// 1M elements (256-thread threadgroups).
func TestElementwiseThroughput(t *testing.T) {
	d := testDriver(t)
	n := 1 << 20
	a := f32buf(t, d, make([]float32, n))
	b := f32buf(t, d, make([]float32, n))
	out := f32buf(t, d, make([]float32, n))
	p := pipe(t, d, "add_scaled")
	params := append(u32bytes(uint32(n)), f32bytes(0.5)...)
	var best time.Duration
	for rep := 0; rep < 7; rep++ {
		cb := d.NewCommandBuffer()
		cb.Encode(dispatch(p, [3]int{n / 256, 1, 1}, [3]int{256, 1, 1}, bufArg(a), bufArg(b), bufArg(out), bytesArg(params)))
		cb.Commit()
		if err := cb.Wait(); err != nil {
			t.Fatal(err)
		}
		if g := cb.GPUTime(); rep == 0 || g < best {
			best = g
		}
	}
	t.Logf("add_scaled over %d elements: %v (%.1f ns/element)", n, best, float64(best.Nanoseconds())/float64(n))
}

// TestSoftmaxTime reports a 64×256 row softmax (256-thread threadgroups:
// simd_max/simd_sum and threadgroup memory).
func TestSoftmaxTime(t *testing.T) {
	d := testDriver(t)
	const rows, n = 64, 256
	x := f32buf(t, d, make([]float32, rows*n))
	y := f32buf(t, d, make([]float32, rows*n))
	p := pipe(t, d, "softmax_rows")
	best := time.Hour
	var st Stats
	for rep := 0; rep < 7; rep++ {
		cb := d.NewCommandBuffer()
		cb.Encode(dispatch(p, [3]int{rows, 1, 1}, [3]int{256, 1, 1}, bufArg(x), bufArg(y), bytesArg(u32bytes(n))))
		cb.Commit()
		if err := cb.Wait(); err != nil {
			t.Fatal(err)
		}
		best = min(best, cb.GPUTime())
		st = StatsOf(cb)
	}
	t.Logf("softmax %d×%d: %v (%d rounds, %d fiber switches)", rows, n, best, st.Rounds, st.Switches)
}
