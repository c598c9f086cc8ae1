package metal

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// limitSweepTests are the op tests TestLaunchersAdaptToMaxThreads runs
// with a lowered per-pipeline maximum: every op family (elementwise, fill
// and copy, reduce, softmax, norm, attention, RoPE, cross-entropy, matmul
// with split-K and tensor ops, index, optimizer, fused), each against the
// CPU backend.
var limitSweepTests = []string{
	"TestOpsFill", "TestOpsCopy", "TestOpsUnary", "TestOpsBinary", "TestOpsWhere",
	"TestOpsReduce", "TestOpsSoftmax", "TestOpsManyRows",
	"TestOpsRMSNorm", "TestOpsLayerNorm", "TestOpsNormParamGradBlocks",
	"TestAttentionFast", "TestAttentionReference",
	"TestOpsRoPE",
	"TestOpsCrossEntropy", "TestOpsCrossEntropyManyRows",
	"TestOpsMatMul",
	"TestOpsIndexSelect", "TestOpsIndexAdd", "TestOpsGatherScatterAdd",
	"TestGradClipMatchesCPU", "TestOpsAdamW",
	"TestOpsSwiGLU", "TestOpsSumSquares",
}

// limitSweepAtLeast128 also run when the maximum is at least 128: they
// check that the tensor-op kernels (which need 128 threads, and otherwise
// give way to the simdgroup kernels) are chosen.
var limitSweepAtLeast128 = []string{"TestMatMul2DFloat32"}

// TestLaunchersAdaptToMaxThreads runs the op tests on the emulator with
// every pipeline's maxTotalThreadsPerThreadgroup lowered to 256, 128 and
// 64 (a real pipeline may report less than the device's 1024, from
// register pressure): a launcher that dispatches a fixed threadgroup
// larger than its pipeline allows panics there, and one that adapts must
// still match the CPU. Each limit runs the tests in a child process,
// because the emulator reads the limit when it opens.
func TestLaunchersAdaptToMaxThreads(t *testing.T) {
	if testDevice() != "metal-emu" {
		t.Skip("lowers the emulator's limits; the GPU reports its own")
	}
	if os.Getenv("FORGE_EMU_MAX_THREADS") != "" {
		t.Skip("already running under a lowered maximum")
	}
	if s := os.Getenv("FORGE_EMU_SCHEDULE"); s != "" && s != "forward" {
		t.Skip("the limits are checked under the forward schedule (the other schedules' runs skip it)")
	}
	if testing.Short() {
		t.Skip("runs the op tests three times (-short)")
	}
	opsDevice(t) // skips without the emulator
	for _, limit := range []string{"256", "128", "64"} {
		tests := limitSweepTests
		if limit != "64" {
			tests = append(append([]string(nil), tests...), limitSweepAtLeast128...)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^("+strings.Join(tests, "|")+")$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FORGE_EMU_MAX_THREADS="+limit, "FORGE_BACKEND=metal-emu", "FORGE_METAL_POOL_POISON=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("op tests with at most %s threads per threadgroup: %v\n%s", limit, err, tail(string(out), 60))
		}
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
