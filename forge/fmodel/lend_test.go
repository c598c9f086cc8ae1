//go:build linux

package fmodel

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// mappedShards counts the lines of /proc/self/maps that map a file of
// dir's shards (Linux only).
func mappedShards(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	return strings.Count(string(b), filepath.Join(dir, ShardDir))
}

// waitUnmapped collects garbage until no shard of dir is mapped, or fails.
func waitUnmapped(t *testing.T, dir string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		runtime.GC()
		if mappedShards(t, dir) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("a shard of %s is still mapped", dir)
}

// Lend hands out each single-part tensor in place, on a page of its own
// with its capacity to the page's end, and keeps the shard mapped past
// Close until the last lent slice's owner is gone.
func TestLendIsInPlaceAndOutlivesClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m.forge")
	v := model(5)
	if _, err := CommitTo(dir, Commit{Tensors: v}); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing lent: Close unmaps at once.
	s, err := r.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if mappedShards(t, dir) == 0 {
		t.Fatal("Load mapped no shard")
	}
	s.Close()
	if n := mappedShards(t, dir); n != 0 {
		t.Fatalf("%d shard mappings after Close", n)
	}

	// A one-page mapping first, so that the next mapping the kernel
	// places (top down, on its 4 KiB pages) does not fall on a 16 KiB
	// boundary by luck.
	for _, n := range []int{os.Getpagesize(), 2 * os.Getpagesize()} {
		pad, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Munmap(pad)
	}
	s, err = r.Load("")
	if err != nil {
		t.Fatal(err)
	}
	ts := s.Tensors()
	var keeps []any
	var lent [][]byte
	for i, e := range s.Manifest.Tensors {
		mem, keep, ok := s.Lend(i)
		if len(e.Parts) == 0 {
			continue // the empty tensor has no bytes
		}
		if !ok {
			t.Fatalf("%s: not lent", e.Name)
		}
		if !bytes.Equal(mem, v[i].Data) {
			t.Fatalf("%s: lent bytes differ", e.Name)
		}
		if &mem[0] != &ts[i].Data[0] {
			t.Fatalf("%s: lent bytes are a copy", e.Name)
		}
		if p := uintptr(unsafe.Pointer(&mem[0])); p%PageSize != 0 {
			t.Fatalf("%s: at %#x, not on a %d-byte page", e.Name, p, PageSize)
		}
		if c := int64(cap(mem)); c != pageUp(int64(len(mem))) {
			t.Fatalf("%s: capacity %d, want %d (to its page's end)", e.Name, c, pageUp(int64(len(mem))))
		}
		keeps = append(keeps, keep)
		lent = append(lent, mem)
	}
	s.Close()
	if mappedShards(t, dir) == 0 {
		t.Fatal("Close unmapped a shard whose bytes were lent")
	}
	for i, mem := range lent {
		if !bytes.Equal(mem, v[i].Data) { // still readable after Close
			t.Fatalf("tensor %d changed after Close", i)
		}
	}
	runtime.KeepAlive(keeps)
	keeps, lent, ts = nil, nil, nil
	waitUnmapped(t, dir)
	if _, _, ok := s.Lend(0); ok {
		t.Fatal("Lend after Close")
	}
}
