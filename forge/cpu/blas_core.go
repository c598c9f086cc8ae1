package cpu

// Choosing OpenBLAS's kernels for the CPU.
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels ("core") once, when
// it is loaded, from the CPU's vendor, family and model. A CPU newer than
// the library is not in its tables, and it falls back to a generic core:
// Debian's 0.3.21 runs an Intel Xeon of family 6 model 207 (AVX-512) on its
// Prescott (SSE3) kernels, at 36–40 sgemm GFLOP/s where its SkylakeX
// kernels reach 233 on the same machine. The core can be named, before
// the library initialises, with the OPENBLAS_CORETYPE environment
// variable, so forge does it for the user:
//
//  1. A user's own OPENBLAS_CORETYPE is respected, whatever it says.
//  2. Otherwise the library is loaded and asked which core it chose
//     (openblas_get_corename). When that core uses narrower vectors than
//     the CPU can execute (blasCoreTier below: AVX-512 → SkylakeX, AVX2 and
//     FMA → Haswell, or Zen on AMD), forge unloads the library, loads it
//     again with OPENBLAS_CORETYPE set to the better core (and then takes
//     the variable out of the environment again, so that programs forge
//     starts choose for themselves), and checks a dozen products — every
//     transpose, sizes off every block edge, float32 and float64 —
//     against the Go kernel within their rounding bound. Some OpenBLAS
//     builds compute wrongly with some cores on some CPUs; if the check
//     fails, the library is loaded once more with its own choice and forge
//     says so on stderr, once.
//  3. A library that cannot be unloaded (already loaded by something else
//     in the process) keeps its choice, and forge says so.
//
// What ran is never hidden: Variant("matmul") is "openblas-<core>", and
// BLASInfo describes the library, its core, who chose it and why.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
)

// cpuInfo is what the choice of a BLAS core needs to know of the CPU.
type cpuInfo struct {
	vendor string // "GenuineIntel", "AuthenticAMD", … ("" if unknown)
	tier   int    // widest vectors it executes with OS support: blasTier*
}

// Vector tiers of a CPU or of an OpenBLAS core.
const (
	blasTierGeneric = iota // SSE2/SSE3 kernels (Prescott, Core2, Nehalem, Atom, …)
	blasTierAVX            // 256-bit AVX without FMA (Sandybridge, Bulldozer…)
	blasTierAVX2           // AVX2 + FMA (Haswell, Zen)
	blasTierAVX512         // AVX-512 F/BW/DQ/VL/CD (SkylakeX, Cooperlake, SapphireRapids)
)

// blasCoreTier returns the vector tier of an OpenBLAS x86 core name (as
// openblas_get_corename prints it; case does not matter). Unknown names are
// generic.
func blasCoreTier(core string) int {
	switch strings.ToLower(core) {
	case "skylakex", "cooperlake", "sapphirerapids":
		return blasTierAVX512
	case "haswell", "zen", "excavator":
		return blasTierAVX2
	case "sandybridge", "bulldozer", "piledriver", "steamroller":
		return blasTierAVX
	}
	return blasTierGeneric
}

// blasCoreFor names the OpenBLAS core that runs this CPU's widest vectors
// well, or "" when there is none better than generic kernels. SkylakeX,
// not Cooperlake, for AVX-512: measured sgemm 2048³ on 2 cores, Intel
// family 6 model 207: SkylakeX 233 GFLOP/s, Cooperlake 160; AMD Zen 4:
// SkylakeX 190, Cooperlake 174–190, Zen 183, Haswell 142.
func blasCoreFor(c cpuInfo) string {
	switch c.tier {
	case blasTierAVX512:
		return "SkylakeX"
	case blasTierAVX2:
		if c.vendor == "AuthenticAMD" || c.vendor == "HygonGenuine" {
			return "Zen"
		}
		return "Haswell"
	case blasTierAVX:
		return "Sandybridge"
	}
	return ""
}

// blasCoreChoice decides, before anything is loaded a second time, which
// core to ask for. userEnv is OPENBLAS_CORETYPE as the user set it,
// libCore what the library chose for itself. It returns the core to load
// ("" to keep the library's choice) and why.
func blasCoreChoice(c cpuInfo, userEnv, libCore string) (want, why string) {
	if userEnv != "" {
		return "", "set by the user's OPENBLAS_CORETYPE=" + userEnv
	}
	if libCore == "" {
		return "", "the library does not say which core it chose"
	}
	best := blasCoreFor(c)
	if best == "" || blasCoreTier(libCore) >= c.tier {
		return "", "the library's own choice for this CPU"
	}
	return best, fmt.Sprintf("the library's own %s does not use this CPU's %s", libCore, tierName(c.tier))
}

func tierName(t int) string {
	return [...]string{"vectors", "AVX", "AVX2 and FMA", "AVX-512"}[t]
}

// blasCheck compares the library's products with the Go kernel's on a
// set of shapes chosen to cross block and tile edges, every transpose, in
// float32 and float64. Each element must lie within twice the rounding
// bound γ_{k+2}·(|alpha|·Σ_p |a_ip||b_pj| + |beta·c_ij|) of one evaluation
// (both are evaluations of the same sums). It returns "" or what failed.
func blasCheck(lib *blasLibrary) string {
	r := rand.New(rand.NewPCG(20240520, 1))
	shapes := [][3]int{{7, 13, 29}, {33, 17, 65}, {64, 70, 45}, {129, 5, 300}, {1, 96, 257}, {48, 48, 1}}
	for i, s := range shapes {
		for tr := range 4 {
			ta, tb := tr&1 != 0, tr&2 != 0
			if msg := blasCheckOne[float32](r, lib, ta, tb, s[0], s[1], s[2]); msg != "" {
				return msg
			}
			if i%2 == 0 {
				if msg := blasCheckOne[float64](r, lib, ta, tb, s[0], s[1], s[2]); msg != "" {
					return msg
				}
			}
		}
	}
	return ""
}

func blasCheckOne[T Float](r *rand.Rand, lib *blasLibrary, ta, tb bool, m, n, k int) string {
	lda, ldb, ldc := k+3, n+1, n+2
	if ta {
		lda = m + 3
	}
	if tb {
		ldb = k + 1
	}
	rows := func(trans bool, r0, c0, ld int) int {
		if trans {
			return (c0-1)*ld + r0
		}
		return (r0-1)*ld + c0
	}
	fill := func(n int) []T {
		s := make([]T, n)
		for i := range s {
			s[i] = T(r.Float64()*2 - 1)
		}
		return s
	}
	a, b := fill(rows(ta, m, k, lda)), fill(rows(tb, k, n, ldb))
	c0 := fill((m-1)*ldc + n)
	var alpha, beta T = 0.75, 0.5
	got, want := slices.Clone(c0), slices.Clone(c0)
	blasGemm(lib, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, got, ldc)
	gemmGo(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
	u := 0x1p-53
	if isF32[T]() {
		u = 0x1p-24
	}
	g := 2 * float64(k+2) * u / (1 - float64(k+2)*u)
	elem := func(x []T, trans bool, i, j, ld int) float64 {
		if trans {
			return float64(x[j*ld+i])
		}
		return float64(x[i*ld+j])
	}
	for i := range m {
		for j := range n {
			mag := math.Abs(float64(beta) * float64(c0[i*ldc+j]))
			for p := range k {
				mag += math.Abs(float64(alpha) * elem(a, ta, i, p, lda) * elem(b, tb, p, j, ldb))
			}
			d := math.Abs(float64(got[i*ldc+j]) - float64(want[i*ldc+j]))
			if !(d <= g*mag) {
				var z T
				return fmt.Sprintf("%T gemm %c%c %d×%d×%d element (%d,%d) = %g, the Go kernel's %g (bound %.2g)",
					z, trans(ta), trans(tb), m, n, k, i, j, got[i*ldc+j], want[i*ldc+j], g*mag)
			}
		}
	}
	return ""
}

// Describe is BLASInfo, with the worker count (backend.Describer).
func (b *Backend) Describe() string {
	return fmt.Sprintf("%d workers, %s", b.workers, BLASInfo())
}

// BLASInfo describes the matrix-multiply path of the CPU backend in one
// line: the library and its kernels (and who chose them), or the Go
// kernel that serves without one. Front ends print it wherever they show
// performance.
func BLASInfo() string {
	initBLAS()
	lib := activeBLAS.Load()
	if lib == nil {
		why := "no BLAS library loaded"
		switch {
		case blasDisabled:
			why = "FORGE_BLAS=off"
		case blasBypassed && loadedBLAS != nil:
			why = fmt.Sprintf("wider than %s's %s kernels, %s", loadedBLAS.version, loadedBLAS.core, loadedBLAS.coreWhy)
		case loadedBLAS != nil:
			why = "the loaded " + loadedBLAS.name + " is switched off"
		}
		return fmt.Sprintf("matmul %s (forge's Go kernel; %s)", goKernelName, why)
	}
	s := "matmul " + lib.name + ": "
	if lib.version != "" {
		s += lib.version
	} else {
		s += lib.path
	}
	if lib.core != "" {
		s += ", " + lib.core + " kernels, " + lib.coreWhy
	}
	if goOverBLAS(lib) {
		s += "; matmuls of 2¹⁸ multiply-adds and more run forge's " + goKernelName
	}
	return s
}

// goKernelTier is the vector tier of the Go matmul's micro-kernel.
func goKernelTier() int {
	switch goKernelName {
	case "go-avx512":
		return blasTierAVX512
	case "go-avx2":
		return blasTierAVX2
	}
	return blasTierGeneric
}

// narrowerThanGo reports whether forge's Go kernel should run instead of
// the library: an OpenBLAS left on kernels of a narrower vector tier than
// the Go kernel's (its better core failed the check or could not be
// loaded) — Prescott's 36–40 sgemm GFLOP/s against 170–183 for the
// AVX-512 Go kernel on an Intel Xeon. A core the user named is run as
// named.
func narrowerThanGo(lib *blasLibrary) bool {
	return lib.core != "" && !lib.userCore && blasCoreTier(lib.core) < goKernelTier()
}

// BLASCores lists OpenBLAS x86 cores this CPU can execute, one per vector
// tier from generic up to the CPU's (Prescott, Haswell, Zen on AMD,
// SkylakeX), so that a test run can play every machine whose library
// would choose one of them (OPENBLAS_CORETYPE=<core>). Empty where
// cpuFeatures knows nothing (other architectures).
func BLASCores() []string {
	c := cpuFeatures()
	if c.vendor == "" {
		return nil
	}
	cores := []string{"Prescott"}
	if c.tier >= blasTierAVX2 {
		cores = append(cores, "Haswell")
		if c.vendor == "AuthenticAMD" || c.vendor == "HygonGenuine" {
			cores = append(cores, "Zen")
		}
	}
	if c.tier >= blasTierAVX512 {
		cores = append(cores, "SkylakeX")
	}
	return cores
}
