//go:build linux || darwin

package metal

import (
	"math"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

// TestAliasHostMapped: on the test device, float32 data in a read-only,
// 16 KiB-aligned mapping (as a mapped model file) aliased in place gives
// a matmul and a unary op the same bits as a copy of it; a kernel that
// writes it fails its command buffer, naming the kernel.
func TestAliasHostMapped(t *testing.T) {
	b := opsDevice(t)
	if _, ok := b.Driver().(driver.HostMemory); !ok {
		t.Skipf("%s has no driver.HostMemory", b.Name())
	}
	const m, k, n = 33, 47, 29
	c := roundUp(4*m*k, driver.PageSize)
	raw, err := syscall.Mmap(-1, 0, c+driver.PageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (driver.PageSize - 1))
	mem := raw[off : off+4*m*k : off+c]
	rng := rand.New(rand.NewPCG(3, 4))
	av := make([]float32, m*k)
	for i := range av {
		av[i] = float32(rng.NormFloat64())
	}
	copy(mem, unsafe.Slice((*byte)(unsafe.Pointer(&av[0])), 4*len(av)))
	if err := syscall.Mprotect(raw[off:off+c], syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	a, err := b.AliasHost(backend.Float32, mem, raw)
	if err != nil {
		t.Fatal(err)
	}
	ac := b.Alloc(backend.Float32, m*k)
	b.Write(ac, av)
	bm := b.Alloc(backend.Float32, k*n)
	bv := make([]float32, k*n)
	for i := range bv {
		bv[i] = float32(rng.NormFloat64())
	}
	b.Write(bm, bv)
	mat := func(x backend.Buffer, r, c int) backend.View {
		return backend.View{Buf: x, Shape: []int{r, c}, Strides: []int{c, 1}}
	}
	same := func(what string, x, y backend.Buffer) {
		t.Helper()
		gx, gy := make([]float32, x.Len()), make([]float32, y.Len())
		b.Read(x, gx)
		b.Read(y, gy)
		for i := range gx {
			if math.Float32bits(gx[i]) != math.Float32bits(gy[i]) {
				t.Fatalf("%s[%d]: %v over the mapping, %v over a copy", what, i, gx[i], gy[i])
			}
		}
	}
	c1, c2 := b.Alloc(backend.Float32, m*n), b.Alloc(backend.Float32, m*n)
	b.MatMul(mat(c1, m, n), mat(a, m, k), mat(bm, k, n), false)
	b.MatMul(mat(c2, m, n), mat(ac, m, k), mat(bm, k, n), false)
	same("matmul", c1, c2)
	e1, e2 := b.Alloc(backend.Float32, m*k), b.Alloc(backend.Float32, m*k)
	b.Unary(backend.Exp, backend.Scalars{}, view(e1), view(a))
	b.Unary(backend.Exp, backend.Scalars{}, view(e2), view(ac))
	same("exp", e1, e2)

	b.Fill(view(a), 0) // package forge refuses this; the backend does not know
	msg := mustPanic(t, b.Sync)
	t.Log(msg)
	if b.Name() == "metal-emu" && (!strings.Contains(msg, "SIGSEGV") || !strings.Contains(msg, "fill")) {
		t.Errorf("a kernel writing the read-only mapping: %s", msg)
	}
	b.Free(a)
	b.Sync()
	if st := b.PoolStats(); st.Mapped != 0 {
		t.Fatalf("Mapped = %d after Free and Sync", st.Mapped)
	}
	if err := syscall.Munmap(raw); err != nil {
		t.Fatal(err)
	}
}
