package cpu

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBLASCoreChoice(t *testing.T) {
	intel512 := cpuInfo{vendor: "GenuineIntel", tier: blasTierAVX512}
	amd512 := cpuInfo{vendor: "AuthenticAMD", tier: blasTierAVX512}
	intel2 := cpuInfo{vendor: "GenuineIntel", tier: blasTierAVX2}
	amd2 := cpuInfo{vendor: "AuthenticAMD", tier: blasTierAVX2}
	old := cpuInfo{vendor: "GenuineIntel", tier: blasTierGeneric}
	for _, c := range []struct {
		cpu           cpuInfo
		user, lib     string
		want, whyPart string
	}{
		{intel512, "", "Prescott", "SkylakeX", "does not use this CPU's AVX-512"}, // the Xeon of family 6 model 207
		{intel512, "", "Haswell", "SkylakeX", "Haswell"},
		{intel512, "", "SkylakeX", "", "own choice"},
		{intel512, "", "SapphireRapids", "", "own choice"},
		{amd512, "", "Cooperlake", "", "own choice"}, // Zen 4 on Debian's 0.3.21
		{amd512, "", "Zen", "SkylakeX", "Zen"},
		{amd2, "", "Prescott", "Zen", "AVX2"},
		{amd2, "", "Zen", "", "own choice"},
		{intel2, "", "Nehalem", "Haswell", "Nehalem"},
		{intel2, "", "Haswell", "", "own choice"},
		{old, "", "Prescott", "", "own choice"},
		{intel512, "Prescott", "Prescott", "", "OPENBLAS_CORETYPE=Prescott"},
		{intel512, "", "", "", "does not say"},
	} {
		want, why := blasCoreChoice(c.cpu, c.user, c.lib)
		if want != c.want || !strings.Contains(why, c.whyPart) {
			t.Errorf("%+v, user %q, library %q: got %q (%s), want %q (…%s…)", c.cpu, c.user, c.lib, want, why, c.want, c.whyPart)
		}
	}
}

// TestBLASHelperProcess is not a test: the tests below run it in a child
// process (the BLAS loads once per process) to print what initBLAS chose.
func TestBLASHelperProcess(t *testing.T) {
	if os.Getenv("FORGE_TEST_BLAS_HELPER") != "1" {
		t.Skip("run by the BLAS selection tests in a child process")
	}
	blasTestFirstCore = os.Getenv("FORGE_TEST_BLAS_FIRST")
	blasTestBreakCheck = os.Getenv("FORGE_TEST_BLAS_BREAK") == "1"
	initBLAS()
	lib := loadedBLAS
	if lib == nil {
		os.Stdout.WriteString("core=none\n")
		return
	}
	if msg := blasCheck(lib); msg != "" {
		t.Fatalf("the loaded library fails the check: %s", msg)
	}
	os.Stdout.WriteString("core=" + lib.core + "\nvariant=" + New().Variant("matmul") + "\ninfo=" + BLASInfo() + "\n")
	if env, ok := os.LookupEnv("OPENBLAS_CORETYPE"); ok && os.Getenv("FORGE_TEST_USER_ENV") == "" {
		t.Fatalf("OPENBLAS_CORETYPE=%s left in the environment", env)
	}
}

// blasChild runs TestBLASHelperProcess with env added and returns its
// key=value lines and its stderr.
func blasChild(t *testing.T, env ...string) (map[string]string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBLASHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "FORGE_TEST_BLAS_HELPER=1")
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s%s", err, out, stderr.String())
	}
	kv := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.Contains(k, " ") {
			kv[k] = v
		}
	}
	return kv, stderr.String()
}

// needUpgradableOpenBLAS skips unless OpenBLAS loads, says its core, and
// this CPU has a core better than Prescott.
func needUpgradableOpenBLAS(t *testing.T) string {
	t.Helper()
	initBLAS()
	if loadedBLAS == nil || loadedBLAS.core == "" {
		t.Skip("no OpenBLAS that names its core")
	}
	best := blasCoreFor(cpuFeatures())
	if best == "" {
		t.Skip("this CPU has no OpenBLAS core better than the generic ones")
	}
	if os.Getenv("OPENBLAS_CORETYPE") != "" {
		t.Skip("OPENBLAS_CORETYPE is set for this run")
	}
	return best
}

// TestBLASCoreUpgrade acts out the Xeon whose OpenBLAS fell back to its
// Prescott kernels: the library is loaded as choosing Prescott, and forge
// must load it again with the CPU's best core, checked, and leave
// OPENBLAS_CORETYPE out of the environment.
func TestBLASCoreUpgrade(t *testing.T) {
	best := needUpgradableOpenBLAS(t)
	kv, stderr := blasChild(t, "FORGE_TEST_BLAS_FIRST=Prescott")
	if kv["core"] != best || kv["variant"] != "openblas-"+best {
		t.Fatalf("loaded as choosing Prescott: core %q variant %q, want %s\n%s", kv["core"], kv["variant"], best, stderr)
	}
	if !strings.Contains(kv["info"], "chosen by forge") || !strings.Contains(kv["info"], "Prescott") {
		t.Errorf("BLASInfo = %q: should say forge chose %s over Prescott", kv["info"], best)
	}
	if strings.Contains(stderr, "forge: cpu:") {
		t.Errorf("a successful upgrade printed a warning: %s", stderr)
	}
	t.Log(kv["info"])
}

// TestBLASCoreCheckFails: when the better core fails its check, the
// library is left on its own choice and forge says so once; where the Go
// kernel uses wider vectors than that choice, the Go kernel runs.
func TestBLASCoreCheckFails(t *testing.T) {
	needUpgradableOpenBLAS(t)
	kv, stderr := blasChild(t, "FORGE_TEST_BLAS_FIRST=Prescott", "FORGE_TEST_BLAS_BREAK=1")
	if kv["core"] != "Prescott" {
		t.Fatalf("after a failed check: core %q, want the library's own Prescott\n%s", kv["core"], stderr)
	}
	if n := strings.Count(stderr, "forge: cpu: OpenBLAS"); n != 1 || !strings.Contains(stderr, "keeps its own Prescott") {
		t.Errorf("stderr should say once that the check failed and Prescott is kept; got %d times:\n%s", n, stderr)
	}
	if !strings.Contains(kv["info"], "failed a check") {
		t.Errorf("BLASInfo = %q: should say the better core failed its check", kv["info"])
	}
	wantVariant := "openblas-Prescott"
	if goKernelTier() > blasTierGeneric {
		wantVariant = goKernelName
		if !strings.Contains(stderr, goKernelName+" matmul runs instead") {
			t.Errorf("stderr should say forge's %s runs instead of Prescott:\n%s", goKernelName, stderr)
		}
	}
	if kv["variant"] != wantVariant {
		t.Errorf("matmul variant %q, want %q (info %q)", kv["variant"], wantVariant, kv["info"])
	}
	t.Log(kv["info"])
}

// TestBLASGoKernelChoice: the Go kernel replaces an OpenBLAS only when the
// library's kernels are narrower than the Go kernel's and the user did not
// name them.
func TestBLASGoKernelChoice(t *testing.T) {
	prev := goKernelName
	defer func() { goKernelName = prev }()
	for _, c := range []struct {
		goKernel, core string
		user, want     bool
	}{
		{"go-avx512", "Prescott", false, true},
		{"go-avx512", "Haswell", false, true},
		{"go-avx512", "SkylakeX", false, false},
		{"go-avx512", "Prescott", true, false},
		{"go-avx2", "Prescott", false, true},
		{"go-avx2", "Zen", false, false},
		{"go", "Prescott", false, false},
		{"go-avx512", "", false, false}, // not an OpenBLAS that names its core
	} {
		goKernelName = c.goKernel
		if got := narrowerThanGo(&blasLibrary{core: c.core, userCore: c.user}); got != c.want {
			t.Errorf("Go kernel %s, library core %q (user's: %v): Go kernel instead = %v, want %v", c.goKernel, c.core, c.user, got, c.want)
		}
	}
}

// TestBLASCoreUserEnv: a user's OPENBLAS_CORETYPE is what runs.
func TestBLASCoreUserEnv(t *testing.T) {
	needUpgradableOpenBLAS(t)
	kv, stderr := blasChild(t, "OPENBLAS_CORETYPE=Prescott", "FORGE_TEST_USER_ENV=1")
	if kv["core"] != "Prescott" || !strings.Contains(kv["info"], "OPENBLAS_CORETYPE") {
		t.Fatalf("with OPENBLAS_CORETYPE=Prescott: core %q, info %q\n%s", kv["core"], kv["info"], stderr)
	}
}

// TestBLASCheckCatches: the check fails a library that computes wrongly —
// here dgemm_ swapped for sgemm_, which reads the float64 data as float32.
func TestBLASCheckCatches(t *testing.T) {
	initBLAS()
	if loadedBLAS == nil {
		t.Skip("no BLAS library loaded")
	}
	if msg := blasCheck(loadedBLAS); msg != "" {
		t.Fatalf("the loaded library fails its check: %s", msg)
	}
	bad := *loadedBLAS
	bad.dgemm = bad.sgemm
	msg := blasCheck(&bad)
	if msg == "" {
		t.Fatal("a library computing the wrong products passed the check")
	}
	t.Log(msg)
}
