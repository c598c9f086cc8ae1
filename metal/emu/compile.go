package emu

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/forgeml/forge/metal/driver"
)

//go:embed shim runtime
var embedded embed.FS

// cxxFlags are the flags of every kernel translation unit.
var cxxFlags = []string{
	"-std=c++17", "-O2", "-fPIC", "-fno-exceptions", "-fno-rtti", "-fno-math-errno",
	"-fvisibility=hidden",
	"-Wno-unknown-attributes", "-Wno-unknown-pragmas", "-Wno-ignored-attributes",
	"-ferror-limit=20",
}

var (
	clangMu      sync.Mutex
	clangPath    string
	clangVersion string
)

// findClang returns the clang++ to compile with: $FORGE_EMU_CLANG, else
// clang++-19, clang++, or the newest clang++-NN on PATH.
func findClang() (path, version string, err error) {
	clangMu.Lock()
	defer clangMu.Unlock()
	if clangPath != "" {
		return clangPath, clangVersion, nil
	}
	p, v, err := locateClang(os.Getenv("FORGE_EMU_CLANG"), os.Getenv("PATH"), runtime.GOOS)
	if err != nil {
		return "", "", err
	}
	clangPath, clangVersion = p, v
	return p, v, nil
}

// locateClang searches for clang++ (override, else on pathList).
func locateClang(override, pathList, goos string) (path, version string, err error) {
	var cands []string
	if override != "" {
		cands = []string{override}
	} else {
		var numbered []string
		for _, dir := range filepath.SplitList(pathList) {
			for _, n := range []string{"clang++-19", "clang++"} {
				cands = append(cands, filepath.Join(dir, n))
			}
			m, _ := filepath.Glob(filepath.Join(dir, "clang++-[0-9]*"))
			numbered = append(numbered, m...)
		}
		// clang++-19 anywhere first, then clang++, then the newest clang++-NN.
		sort.SliceStable(cands, func(i, j int) bool {
			return filepath.Base(cands[i]) == "clang++-19" && filepath.Base(cands[j]) != "clang++-19"
		})
		sort.Slice(numbered, func(i, j int) bool {
			vi, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(numbered[i]), "clang++-"))
			vj, _ := strconv.Atoi(strings.TrimPrefix(filepath.Base(numbered[j]), "clang++-"))
			return vi > vj
		})
		cands = append(cands, numbered...)
	}
	for _, c := range cands {
		p := c
		if !strings.ContainsRune(c, filepath.Separator) {
			if lp, err := exec.LookPath(c); err == nil {
				p = lp
			} else {
				continue
			}
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			continue
		}
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			continue
		}
		v := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
		return p, v, nil
	}
	hint := "apt-get install clang-19"
	if goos == "darwin" {
		hint = "xcode-select --install"
	}
	if override != "" {
		return "", "", fmt.Errorf("metal-emu: FORGE_EMU_CLANG=%s is not a working clang++ (%s)", override, hint)
	}
	return "", "", fmt.Errorf("metal-emu: no clang++ found on PATH: the emulator compiles the Metal kernels with clang (%s, or set FORGE_EMU_CLANG)", hint)
}

// clangVersionNumber extracts "19.1.7" from clang's version line.
func clangVersionNumber(v string) string {
	i := strings.Index(v, "version ")
	if i < 0 {
		return v
	}
	f := strings.Fields(v[i+len("version "):])
	if len(f) == 0 {
		return v
	}
	return f[0]
}

// compileResult is a compiled library.
type compileResult struct {
	path     string
	cached   bool
	duration time.Duration
}

// compileProgram builds the shared library of p (or finds it in the
// cache) and returns its path.
func compileProgram(p *program, sources map[string]string, cacheDir string, log io.Writer) (compileResult, error) {
	start := time.Now()
	clang, version, err := findClang()
	if err != nil {
		return compileResult{}, err
	}
	// The files that make the library, by relative path.
	files := map[string]string{}
	err = fs.WalkDir(embedded, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := embedded.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = string(b)
		return nil
	})
	if err != nil {
		return compileResult{}, err
	}
	for n, s := range sources {
		if strings.Contains(n, "..") || filepath.IsAbs(n) {
			return compileResult{}, fmt.Errorf("metal-emu: bad source file name %q", n)
		}
		if h, ok := p.headers[n]; ok {
			s = h // with its threadgroup declarations and function constants rewritten
		}
		files["src/"+n] = s
	}
	for n, s := range p.units {
		files["gen/"+n] = s
	}
	flags := append(append([]string(nil), cxxFlags...), archFlags()...)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s/%s\x00", generatorVersion, version, strings.Join(flags, " "), runtime.GOOS, runtime.GOARCH)
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%s\x00%d\x00%s", k, len(files[k]), files[k])
	}
	sum := hex.EncodeToString(h.Sum(nil))[:24]
	if cacheDir == "" {
		cacheDir = defaultCacheDir()
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return compileResult{}, fmt.Errorf("metal-emu: cache dir: %w", err)
	}
	out := filepath.Join(cacheDir, sum+".so")
	if _, err := os.Stat(out); err == nil {
		return compileResult{path: out, cached: true, duration: time.Since(start)}, nil
	}

	if log != nil {
		fmt.Fprintf(log, "metal-emu: compiling %d kernel files with %s (first use of these sources; cached in %s)…\n", len(sources), filepath.Base(clang), cacheDir)
		defer func() {
			fmt.Fprintf(log, "metal-emu: compiled in %.1fs\n", time.Since(start).Seconds())
		}()
	}
	tmp, err := os.MkdirTemp(cacheDir, "build-")
	if err != nil {
		return compileResult{}, fmt.Errorf("metal-emu: %w", err)
	}
	defer os.RemoveAll(tmp)
	for k, s := range files {
		path := filepath.Join(tmp, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return compileResult{}, err
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			return compileResult{}, err
		}
	}
	shimDir := filepath.Join(tmp, "shim")
	srcDir := filepath.Join(tmp, "src")
	type job struct {
		src, obj string
		args     []string
	}
	var jobs []job
	units := make([]string, 0, len(p.units))
	for n := range p.units {
		units = append(units, n)
	}
	sort.Strings(units)
	for _, n := range units {
		args := append([]string(nil), flags...)
		args = append(args, "-I", shimDir, "-I", srcDir)
		if n != "forge_kernel_table.cpp" {
			args = append(args, "-include", filepath.Join(shimDir, "metal_shim.h"))
			if driver.UsesTensorOps(sources[strings.TrimSuffix(n, ".cpp")]) {
				// MSL 4.0 tensor ops (shim/forge_tensor_ops.h): a class-type
				// template argument (matmul2d's descriptor) needs C++20.
				args = append(args, "-std=c++20", "-include", filepath.Join(shimDir, "forge_tensor_ops.h"))
			}
		}
		jobs = append(jobs, job{filepath.Join(tmp, "gen", n), filepath.Join(tmp, n+".o"), args})
	}
	rtFlags := append([]string(nil), flags...)
	rtFlags = append(rtFlags, "-I", shimDir)
	jobs = append(jobs, job{filepath.Join(tmp, "runtime", "runtime.cpp"), filepath.Join(tmp, "runtime.o"), rtFlags})

	errs := make([]error, len(jobs))
	par := runtime.GOMAXPROCS(0)
	if par > 4 {
		par = 4
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append(append([]string(nil), j.args...), "-c", j.src, "-o", j.obj)
			stderr, err := runClang(clang, tmp, args)
			if err != nil && isStructCopyError(stderr) {
				// Valid MSL that clang's address spaces reject: compile the
				// file without them.
				args = append([]string{"-DFORGE_EMU_NO_ADDRESS_SPACES"}, args...)
				stderr, err = runClang(clang, tmp, args)
			}
			if err != nil {
				errs[i] = clangError(stderr, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return compileResult{}, fmt.Errorf("metal-emu: compiling kernels: %w", err)
	}
	link := []string{"-shared", "-o", filepath.Join(tmp, "lib.so")}
	for _, j := range jobs {
		link = append(link, j.obj)
	}
	if runtime.GOOS == "linux" {
		link = append(link, "-lm", "-lpthread")
	}
	cmd := exec.Command(clang, link...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return compileResult{}, fmt.Errorf("metal-emu: linking kernels: %w", clangError(stderr.String(), err))
	}
	if err := os.Rename(filepath.Join(tmp, "lib.so"), out); err != nil {
		return compileResult{}, fmt.Errorf("metal-emu: %w", err)
	}
	pruneCache(cacheDir, out)
	return compileResult{path: out, duration: time.Since(start)}, nil
}

// pruneCache keeps the cache from growing without bound: it removes all
// but the 32 newest libraries (a library another process has loaded stays
// usable: unlinking a mapped file is safe) and build directories older than
// an hour (left by interrupted compiles).
func pruneCache(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type lib struct {
		path string
		mod  time.Time
	}
	var libs []lib
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		p := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir() && strings.HasPrefix(e.Name(), "build-") && time.Since(info.ModTime()) > time.Hour:
			os.RemoveAll(p)
		case !e.IsDir() && strings.HasSuffix(e.Name(), ".so") && p != keep:
			libs = append(libs, lib{p, info.ModTime()})
		}
	}
	const max = 31
	if len(libs) <= max {
		return
	}
	sort.Slice(libs, func(i, j int) bool { return libs[i].mod.After(libs[j].mod) })
	for _, l := range libs[max:] {
		os.Remove(l.path)
	}
}

func runClang(clang, dir string, args []string) (string, error) {
	cmd := exec.Command(clang, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return stderr.String(), err
}

// isStructCopyError reports whether every error in clang's output is a
// copy of a struct out of device/constant/threadgroup memory — valid MSL
// that clang rejects because its implicit copy constructor and assignment
// take a reference in the generic address space.
func isStructCopyError(stderr string) bool {
	if !strings.Contains(stderr, "cannot bind reference in address space") {
		return false
	}
	n := 0
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "error:") || strings.Contains(l, "errors generated") {
			continue
		}
		n++
		if !strings.Contains(l, "no matching constructor for initialization") &&
			!strings.Contains(l, "no viable overloaded '='") &&
			!strings.Contains(l, "no viable conversion from") {
			return false
		}
	}
	return n > 0
}

// clangError keeps the first errors of clang's output (with the source
// lines and carets that follow them).
func clangError(stderr string, err error) error {
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	first := -1
	for i, l := range lines {
		if strings.Contains(l, "error:") {
			first = i
			break
		}
	}
	if first < 0 {
		if len(lines) > 12 {
			lines = lines[:12]
		}
		return fmt.Errorf("%v: %s", err, strings.Join(lines, "\n"))
	}
	// include "In file included from"/"note" context just before? keep it short
	end := first + 12
	if end > len(lines) {
		end = len(lines)
	}
	return errors.New(strings.Join(lines[first:end], "\n"))
}

// archFlags lets clang use FMA and AVX2 where the CPU has them (the flags
// are part of the cache key, so a library never runs on a CPU without
// them).
//
// On Linux, -fstack-clash-protection makes a kernel touch every page of a
// large stack frame in order, so one that outgrows its fiber stack hits
// the guard page below it rather than jumping over it into another fiber's.
func archFlags() []string {
	var f []string
	if runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasBMI2 {
		f = append(f, "-march=x86-64-v3")
	}
	if runtime.GOOS == "linux" {
		f = append(f, "-fstack-clash-protection")
	}
	if runtime.GOOS != "darwin" {
		// half arithmetic rounds after every operation, as on the GPU
		// (Apple silicon computes in half natively anyway).
		f = append(f, "-fexcess-precision=16")
	}
	return f
}

func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "forge", "metal-emu")
	}
	return filepath.Join(os.TempDir(), "forge-metal-emu")
}
