package doctor

// The machine section and the kernel compile.

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal"
	"github.com/forgeml/forge/metal/driver"
	"github.com/forgeml/forge/metal/emu"
)

// metalOf is the Metal backend dev runs on (the GPU's or the emulator's),
// or nil for another backend.
func metalOf(dev *forge.Device) *metal.Backend {
	b, err := backend.Open(dev.Name())
	if err != nil {
		return nil
	}
	mb, _ := b.(*metal.Backend)
	return mb
}

func (r *run) machine() {
	r.progress("machine: %s/%s, device %s", runtime.GOOS, runtime.GOARCH, r.dev.Name())
	r.section("Machine")
	r.line("- OS: %s (%s/%s, %s)", osName(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	if translated() {
		r.line("- this amd64 binary runs under Rosetta on Apple silicon: Metal needs the arm64 build (GOARCH=arm64 go install …)")
	}
	r.line("- CPU: %s, %d logical CPUs, GOMAXPROCS %d", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0))
	r.line("- device under test: %s", r.dev.Describe())
	if mb := metalOf(r.dev); mb != nil {
		r.line("- Metal device: %s", mb.Device())
		level := driver.TensorOpsNone
		if t, ok := mb.Driver().(driver.TensorOps); ok {
			level = t.TensorOps()
		}
		if _, ok := mb.Driver().(*emu.Driver); ok {
			r.line("- GPU family: none, an emulator: the MSL kernels run on this CPU (clang); nothing here ran on an Apple GPU")
			r.line("- tensor ops (MSL 4.0): the emulator reports %s, so the kernels take that path (FORGE_EMU_TENSOR_OPS=0: none)", level)
		} else {
			r.line("- GPU family: %s", gpuFamily(level))
		}
	} else if r.dev.Name() != "cpu" {
		r.line("- GPU family: not a Metal device")
	}
	// The reference of every comparison below.
	r.line("- CPU reference (BLAS and core): %s", r.cpu.Describe())
}

// gpuFamily says what the Metal 4 tensor-op level means for the GPU.
func gpuFamily(l driver.TensorOpsLevel) string {
	switch l {
	case driver.TensorOpsAccelerated:
		return "Metal 4 and Apple10 (M5 or later): MSL 4.0 tensor ops on the neural accelerators"
	case driver.TensorOpsSupported:
		return "Metal 4 (before Apple10): MSL 4.0 tensor ops run on the shader cores"
	}
	return "before Metal 4 (or macOS before 26): simdgroup_matrix kernels, MSL 3.1"
}

// kernels compiles every kernel file on the device under test.
func (r *run) kernels() {
	r.section("Kernels")
	mb := metalOf(r.dev)
	if mb == nil {
		r.line("the %s device runs Go (and BLAS) code: there are no kernels to compile", r.dev.Name())
		r.progress("kernels: nothing to compile on %s", r.dev.Name())
		return
	}
	var files []string
	for f := range kernels.Sources() {
		if strings.HasSuffix(f, ".metal") {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	if d, ok := mb.Driver().(*emu.Driver); ok {
		took, cached := d.CompileTime()
		how := "compiled with clang"
		if cached {
			how = "found compiled in the emulator's cache (same sources, clang and flags)"
		}
		r.line("metal-emu compiles all %d kernel files into one library when it opens: %s in %s", len(files), how, took.Round(time.Millisecond))
		r.line("files: %s", strings.Join(files, ", "))
		r.progress("kernels: %d files, %s in %s", len(files), how, took.Round(time.Millisecond))
		return
	}
	total := time.Duration(0)
	failed := 0
	for _, f := range files {
		start := time.Now()
		lang, ok, err := mb.CompileLibrary(f)
		took := time.Since(start)
		if !ok {
			r.line("the %s driver does not compile files one by one: nothing timed", r.dev.Name())
			return
		}
		total += took
		if err != nil {
			failed++
			r.fail("kernel file %s does not compile: %v", f, err)
			r.progress("kernels: %s FAILED", f)
			continue
		}
		r.line("- %-18s %-8s %8s", f, lang, took.Round(time.Millisecond))
		r.progress("kernels: %s compiled (%s) in %s", f, lang, took.Round(time.Millisecond))
	}
	r.line("%d files, %d failed, %s in all", len(files), failed, total.Round(time.Millisecond))
}

// osName is the OS release: PRETTY_NAME and the kernel on Linux, the
// product version on macOS.
func osName() string {
	switch runtime.GOOS {
	case "linux":
		name := "Linux"
		if f, err := os.Open("/etc/os-release"); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
					name = strings.Trim(v, `"`)
				}
			}
			f.Close()
		}
		if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
			name += ", kernel " + strings.TrimSpace(string(b))
		}
		return name
	case "darwin":
		if out, err := exec.Command("sw_vers", "-productVersion").Output(); err == nil {
			return "macOS " + strings.TrimSpace(string(out))
		}
		return "macOS"
	}
	return runtime.GOOS
}

// cpuModel is the CPU's model name ("unknown" if the OS does not say).
func cpuModel() string {
	switch runtime.GOOS {
	case "linux":
		f, err := os.Open("/proc/cpuinfo")
		if err != nil {
			return "unknown"
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && (strings.TrimSpace(k) == "model name" || strings.TrimSpace(k) == "Model") {
				return strings.TrimSpace(v)
			}
		}
	case "darwin":
		if out, err := exec.Command("sysctl", "-n", "machdep.cpu.brand_string").Output(); err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	return "unknown"
}

// translated reports whether the process runs under Rosetta.
func translated() bool {
	if runtime.GOOS != "darwin" || runtime.GOARCH != "amd64" {
		return false
	}
	out, err := exec.Command("sysctl", "-n", "sysctl.proc_translated").Output()
	return err == nil && strings.TrimSpace(string(out)) == "1"
}
