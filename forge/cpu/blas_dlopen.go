//go:build darwin || linux || freebsd || netbsd

package cpu

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// openBLAS dlopens path and looks up sgemm_ and dgemm_. An OpenBLAS (found
// by its openblas_set_num_threads symbol, whatever the file is called) is
// set to one thread (Go splits the work, see blas.go) and, where its own
// choice of kernels wastes the CPU's vectors, loaded again with better
// ones (blas_core.go).
func openBLAS(path string) (*blasLibrary, error) {
	first := ""
	if blasTestFirstCore != "" { // tests: a library that chose this core itself
		first = blasTestFirstCore
	}
	lib, h, err := loadBLAS(path, first)
	if err != nil || lib.setThreads == 0 || lib.core == "" {
		return lib, err
	}
	userEnv := os.Getenv("OPENBLAS_CORETYPE")
	if first != "" {
		userEnv = ""
	}
	want, why := blasCoreChoice(cpuFeatures(), userEnv, lib.core)
	lib.coreWhy = why
	lib.userCore = userEnv != ""
	if want == "" || runtime.GOOS != "linux" {
		return lib, nil
	}
	own := lib.core
	// reload unloads the library and loads it again with core. If the
	// library stays loaded (something else in the process holds it), it
	// reports so and the loaded one is still usable.
	reload := func(core string) (*blasLibrary, error) {
		purego.Dlclose(h)
		const rtldNoload = 0x4 // glibc
		if still, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL|rtldNoload); err == nil && still != 0 {
			h = still
			return nil, errors.New("the library stays loaded (something else in the process holds it)")
		}
		nl, nh, err := loadBLAS(path, core)
		h = nh
		return nl, err
	}
	better, err := reload(want)
	if better == nil {
		if err != nil && h == 0 {
			// Unloaded and not loadable with that core: take it back as it was.
			var err2 error
			if lib, h, err2 = loadBLAS(path, first); err2 != nil {
				return nil, err2
			}
		}
		blasNote = fmt.Sprintf("forge: cpu: OpenBLAS runs its %s kernels, which do not use this CPU's %s (%v)", own, tierName(cpuFeatures().tier), err)
		lib.coreWhy = "the library's own choice (" + why + ", but " + err.Error() + ")"
		return lib, nil
	}
	msg := blasCheck(better)
	if blasTestBreakCheck {
		msg = "broken on purpose by the test"
	}
	if msg == "" {
		better.coreWhy = fmt.Sprintf("chosen by forge (%s; checked against the Go kernel)", why)
		return better, nil
	}
	back, err := reload(first)
	if back == nil {
		return nil, fmt.Errorf("reloading after OpenBLAS's %s kernels failed their check: %v", want, err)
	}
	back.coreWhy = fmt.Sprintf("the library's own choice (its %s kernels failed a check: %s)", want, msg)
	blasNote = fmt.Sprintf("forge: cpu: OpenBLAS's %s kernels disagree with the Go kernel on this CPU (%s), so the library keeps its own %s kernels",
		want, msg, back.core)
	return back, nil
}

// blasTestFirstCore and blasTestBreakCheck let a test process act as a
// machine whose OpenBLAS picks the named core for itself, and make the
// check of a better core fail. Set only by tests, before initBLAS.
var (
	blasTestFirstCore  string
	blasTestBreakCheck bool
)

// loadBLAS dlopens path (with OPENBLAS_CORETYPE=core in the environment
// while it initialises, when core is not "") and binds its symbols.
func loadBLAS(path, core string) (*blasLibrary, uintptr, error) {
	if core != "" {
		prev, had := os.LookupEnv("OPENBLAS_CORETYPE")
		os.Setenv("OPENBLAS_CORETYPE", core)
		defer func() {
			if had {
				os.Setenv("OPENBLAS_CORETYPE", prev)
			} else {
				os.Unsetenv("OPENBLAS_CORETYPE")
			}
		}()
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, 0, err
	}
	lib := &blasLibrary{name: "blas", path: path}
	if lib.sgemm, err = purego.Dlsym(h, "sgemm_"); err != nil {
		return nil, h, errors.New("no sgemm_ symbol")
	}
	if lib.dgemm, err = purego.Dlsym(h, "dgemm_"); err != nil {
		return nil, h, errors.New("no dgemm_ symbol")
	}
	if set, err := purego.Dlsym(h, "openblas_set_num_threads"); err == nil && set != 0 {
		lib.name = "openblas"
		lib.setThreads = set
		lib.getThreads, _ = purego.Dlsym(h, "openblas_get_num_threads")
		purego.SyscallN(set, 1)
		if fn, err := purego.Dlsym(h, "openblas_get_corename"); err == nil && fn != 0 {
			r, _, _ := purego.SyscallN(fn)
			lib.core = cString(r)
		}
		if fn, err := purego.Dlsym(h, "openblas_get_config"); err == nil && fn != 0 {
			r, _, _ := purego.SyscallN(fn)
			// "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH …": name and version.
			if f := strings.Fields(cString(r)); len(f) >= 2 {
				lib.version = f[0] + " " + f[1]
			}
		}
		if lib.core != "" {
			lib.name = "openblas-" + lib.core
		}
	}
	if path == "/System/Library/Frameworks/Accelerate.framework/Accelerate" {
		lib.name = "accelerate"
		lib.ownThreads = true
	}
	return lib, h, nil
}

// cString copies the NUL-terminated C string at p (at most 256 bytes).
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	var b []byte
	for i := 0; i < 256; i++ {
		c := *(*byte)(unsafe.Add(ptr, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// callGemm calls a Fortran ?gemm_ with its argument vector (13 pointers
// and the two hidden CHARACTER lengths).
func callGemm(fn uintptr, argv []uintptr) {
	purego.SyscallN(fn, argv...)
}

// setBLASThreads sets OpenBLAS's thread count (a no-op for other
// libraries). Only blasCall changes it, holding blasMu.
func (lib *blasLibrary) setBLASThreads(n int) {
	if lib.setThreads != 0 {
		purego.SyscallN(lib.setThreads, uintptr(n))
	}
}

// blasThreads returns OpenBLAS's thread count (0 for other libraries).
func (lib *blasLibrary) blasThreads() int {
	if lib.getThreads == 0 {
		return 0
	}
	r, _, _ := purego.SyscallN(lib.getThreads)
	return int(int32(r))
}
