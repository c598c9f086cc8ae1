//go:build linux || darwin

package emu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// lib is a loaded kernel library.
type lib struct {
	path      string
	handle    uintptr
	launch    uintptr
	reflect   uintptr
	benchSwap uintptr
	abiCheck  uintptr
	psize     uintptr
	tgBytesFn uintptr
}

var (
	libsMu sync.Mutex
	libs   = map[string]*lib{}
)

const libAvailable = true

// loadLib opens the library at path once per process.
func loadLib(path string) (*lib, error) {
	libsMu.Lock()
	defer libsMu.Unlock()
	if l := libs[path]; l != nil {
		return l, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("metal-emu: loading %s: %w", path, err)
	}
	l := &lib{path: path, handle: h}
	for _, s := range []struct {
		name string
		p    *uintptr
	}{{"forge_emu_launch", &l.launch}, {"forge_emu_reflect", &l.reflect}, {"forge_emu_bench_switch", &l.benchSwap}, {"forge_emu_abi_check", &l.abiCheck}, {"forge_emu_param_size", &l.psize}, {"forge_emu_tg_bytes", &l.tgBytesFn}} {
		*s.p, err = purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("metal-emu: %s: %w", path, err)
		}
	}
	if n, _, _ := purego.SyscallN(l.abiCheck); n != unsafe.Sizeof(launchArgs{}) {
		return nil, fmt.Errorf("metal-emu: %s: launch struct of %d bytes, Go expects %d", path, n, unsafe.Sizeof(launchArgs{}))
	}
	libs[path] = l
	return l, nil
}

// run calls forge_emu_launch; L and everything it points to must be
// pinned by the caller.
func (l *lib) run(L *launchArgs) int32 {
	r, _, _ := purego.SyscallN(l.launch, uintptr(unsafe.Pointer(L)))
	return int32(r)
}

func (l *lib) names() ([]string, error) {
	buf := make([]byte, 1<<20)
	var p runtime.Pinner
	p.Pin(&buf[0])
	defer p.Unpin()
	n, _, _ := purego.SyscallN(l.reflect, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	if int64(n) < 0 {
		return nil, fmt.Errorf("metal-emu: reflection table too large")
	}
	return splitLines(string(buf[:n])), nil
}

// paramSize is sizeof the type kernel k binds at [[buffer(index)]] by
// reference or value (-1 for a pointer or no such parameter).
func (l *lib) paramSize(k, index int) int {
	r, _, _ := purego.SyscallN(l.psize, uintptr(k), uintptr(index))
	return int(int64(r))
}

// tgBytes is the static threadgroup memory of kernel k: the declarations
// in its body, laid out as the arena does (-1 if unknown).
func (l *lib) tgBytes(k int) int {
	r, _, _ := purego.SyscallN(l.tgBytesFn, uintptr(k))
	return int(int64(r))
}

// switchCost measures one fiber switch (n round trips).
func (l *lib) switchCost(n int) float64 {
	r, _, _ := purego.SyscallN(l.benchSwap, uintptr(n))
	return float64(int64(r)) / 1000
}
