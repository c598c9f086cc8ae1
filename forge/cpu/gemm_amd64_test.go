//go:build amd64 && !purego

package cpu

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	xcpu "golang.org/x/sys/cpu"
)

// TestGemmKernelDetection: the CPUID/XGETBV checks of gemm_amd64.go agree
// with x/sys/cpu, and the kernel sets are listed fastest first.
func TestGemmKernelDetection(t *testing.T) {
	if got, want := hasAVX2FMA(), xcpu.X86.HasAVX2 && xcpu.X86.HasFMA; got != want {
		t.Errorf("hasAVX2FMA() = %v, x/sys/cpu says %v", got, want)
	}
	if got, want := hasAVX512F(), xcpu.X86.HasAVX2 && xcpu.X86.HasFMA && xcpu.X86.HasAVX512F; got != want {
		t.Errorf("hasAVX512F() = %v, x/sys/cpu says %v", got, want)
	}
	var names []string
	for _, s := range gemmKernelSets {
		names = append(names, s.name)
	}
	want := []string{"go"}
	if hasAVX2FMA() {
		want = append([]string{"avx2"}, want...)
	}
	if hasAVX512F() {
		want = append([]string{"avx512"}, want...)
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("kernel sets %v, want %v", names, want)
	}
	// init read FORGE_GEMM_KERNEL before go test's cache began to log
	// what the tests read; reading it again here makes the variable part
	// of the cache key, so changing it reruns the package.
	t.Logf("gemm kernel sets here: %v; in use: %s (FORGE_GEMM_KERNEL=%q)", names, goKernelName, os.Getenv("FORGE_GEMM_KERNEL"))
}

// TestGemmKernelEnv runs this test binary with FORGE_GEMM_KERNEL set to
// each kernel set this CPU runs, and to a bad name, and checks (in the
// child, TestGemmKernelEnv again) which set init put in use.
func TestGemmKernelEnv(t *testing.T) {
	if want, ok := os.LookupEnv("FORGE_TEST_GEMM_VARIANT"); ok {
		if goKernelName != want {
			t.Fatalf("FORGE_GEMM_KERNEL=%q: variant %q, want %q", os.Getenv("FORGE_GEMM_KERNEL"), goKernelName, want)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts child processes")
	}
	type run struct{ env, variant, stderr string }
	var runs []run
	for _, s := range gemmKernelSets {
		runs = append(runs, run{s.name, s.variant, ""})
	}
	runs = append(runs, run{"bogus", gemmKernelSets[0].variant, `FORGE_GEMM_KERNEL="bogus"`})
	for _, r := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGemmKernelEnv$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FORGE_GEMM_KERNEL="+r.env, "FORGE_TEST_GEMM_VARIANT="+r.variant)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("FORGE_GEMM_KERNEL=%s: %v\n%s%s", r.env, err, out, stderr.String())
		}
		if got := stderr.String(); (r.stderr == "") != (got == "") || !strings.Contains(got, r.stderr) {
			t.Errorf("FORGE_GEMM_KERNEL=%s: stderr %q, want it to say %q", r.env, got, r.stderr)
		}
	}
}
