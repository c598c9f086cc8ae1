//go:build linux || darwin

package emu

import (
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/forgeml/forge/metal/driver"
)

// pagesMapping maps n driver.PageSize pages starting on a driver.PageSize
// boundary (whatever the host's page size), unmapped at the test's end.
func pagesMapping(t *testing.T, n int) []byte {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, (n+1)*driver.PageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	off := int(-uintptr(unsafe.Pointer(&m[0])) & (driver.PageSize - 1))
	return m[off : off+n*driver.PageSize : off+n*driver.PageSize]
}

// TestNoCopyBuffer: NewBufferNoCopy uses the memory in place (kernels
// read a read-only mapping; a write into it fails the command buffer
// naming the buffer), refuses what is not whole 16 KiB pages, and its
// Release leaves the memory mapped.
func TestNoCopyBuffer(t *testing.T) {
	d := testDriver(t)
	n := driver.PageSize / 4
	mem := pagesMapping(t, 2)
	a := unsafe.Slice((*float32)(unsafe.Pointer(&mem[0])), n)
	b := unsafe.Slice((*float32)(unsafe.Pointer(&mem[driver.PageSize])), n)
	for i := range n {
		a[i], b[i] = float32(i), float32(3*i)
	}
	if err := syscall.Mprotect(mem, syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	ba, err := d.NewBufferNoCopy(mem[:driver.PageSize])
	if err != nil {
		t.Fatal(err)
	}
	bb, err := d.NewBufferNoCopy(mem[driver.PageSize:])
	if err != nil {
		t.Fatal(err)
	}
	if &ba.Bytes()[0] != &mem[0] {
		t.Fatal("NewBufferNoCopy copied the memory")
	}
	out := f32buf(t, d, make([]float32, n))
	params := append(u32bytes(uint32(n)), f32bytes(0.5)...)
	if err := run(d, pipe(t, d, "add_scaled"), [3]int{n / 128, 1, 1}, [3]int{128, 1, 1}, bufArg(ba), bufArg(bb), bufArg(out), bytesArg(params)); err != nil {
		t.Fatal(err)
	}
	for i, v := range f32s(out) {
		if want := a[i] + 0.5*b[i]; v != want {
			t.Fatalf("out[%d] = %v, want %v", i, v, want)
		}
	}
	// A kernel writing the read-only pages faults; the driver carries on.
	err = run(d, pipe(t, d, "add_scaled"), [3]int{n / 128, 1, 1}, [3]int{128, 1, 1}, bufArg(out), bufArg(out), bufArg(ba), bytesArg(params))
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "SIGSEGV") || !strings.Contains(err.Error(), "[[buffer(2)]] out") {
		t.Errorf("write into a read-only mapping: err = %v", err)
	}
	ba.Release()
	bb.Release()
	if a[n-1] != float32(n-1) || b[n-1] != float32(3*(n-1)) {
		t.Fatal("Release changed the memory")
	}
	TestAddScaled(t)

	w := pagesMapping(t, 2)
	for _, c := range []struct {
		name string
		mem  []byte
	}{
		{"empty", w[:0]},
		{"misaligned", w[4096 : 4096+driver.PageSize]},
		{"part of a page", w[:driver.PageSize+4096]},
	} {
		if _, err := d.NewBufferNoCopy(c.mem); err == nil || !strings.Contains(err.Error(), "not whole 16384-byte pages") {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
}
