package forge

import (
	"errors"
	"strings"
	"testing"
)

// refusal runs fn and returns the *Error it panics with (nil if none).
func refusal(t *testing.T, fn func()) *Error {
	t.Helper()
	err := Try(fn)
	if err == nil {
		return nil
	}
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("panic is not a *forge.Error: %v", err)
	}
	return fe
}

// TestBudgetRefusesHugeAllocation: Zeros(100000, 100000) (37.3 GiB) with
// 1 GiB of RAM available panics with one line naming the size, the budget
// and what to do, and asks the device for no memory.
func TestBudgetRefusesHugeAllocation(t *testing.T) {
	t.Setenv("FORGE_MEMORY_AVAILABLE", "1073741824")
	dev, m := meteredDevice(t)
	old := DefaultDevice()
	SetDefaultDevice(dev)
	defer SetDefaultDevice(old)

	e := refusal(t, func() { Zeros(100000, 100000) })
	if e == nil {
		t.Fatal("Zeros(100000, 100000) was not refused")
	}
	msg := e.Error()
	for _, want := range []string{"forge: zeros:", "[100000 100000]", "needs 37.3 GiB", "memory budget of 1.0 GiB (available RAM)", ":set budget", "SetMemoryBudget"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("message is not one line: %q", msg)
	}
	if m.live != 0 || len(m.bufs) != 0 {
		t.Errorf("the refused allocation took %d bytes", m.live)
	}
	// Randn stages its values on the host first: refused before that too.
	if e := refusal(t, func() { Randn(100000, 100000) }); e == nil || !strings.Contains(e.Error(), "forge: randn:") {
		t.Errorf("Randn(100000, 100000): %v", e)
	}
	// A small tensor still works.
	if got := Ones(1024, 1024).Sum().Item(); got != 1<<20 {
		t.Errorf("Ones(1024, 1024).Sum() = %v", got)
	}
}

// TestSetMemoryBudget: a set budget refuses an op output that would pass
// it, counting the tensors already live, and 0 restores the default.
func TestSetMemoryBudget(t *testing.T) {
	dev, m := meteredDevice(t)
	old := DefaultDevice()
	SetDefaultDevice(dev)
	defer SetDefaultDevice(old)
	defer SetMemoryBudget(0)

	a := Ones(1024, 1024) // 4 MiB
	SetMemoryBudget(6 << 20)
	if b, src := MemoryBudget(); b != 6<<20 || src != "set" {
		t.Errorf("MemoryBudget() = %d, %q", b, src)
	}
	before := m.live
	e := refusal(t, func() { a.Add(a) }) // 4 MiB more: over 6 MiB with a live
	if e == nil {
		t.Fatal("a.Add(a) over the budget was not refused")
	}
	if !strings.Contains(e.Error(), "needs 4.0 MiB, over the memory budget of 6.0 MiB (set with forge.SetMemoryBudget or :set budget), with 4.0 MiB already in tensors") {
		t.Errorf("message: %q", e.Error())
	}
	if m.live != before {
		t.Errorf("the refused op took %d bytes", m.live-before)
	}
	SetMemoryBudget(0)
	if _, src := MemoryBudget(); src == "set" {
		t.Error("SetMemoryBudget(0) did not restore the default")
	}
	a.Add(a) // fits again
	if e := refusal(t, func() { SetMemoryBudget(-1) }); e == nil {
		t.Error("a negative budget was accepted")
	}
}
