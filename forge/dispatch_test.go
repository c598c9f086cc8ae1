package forge

import (
	"slices"
	"testing"
)

// TestDeviceVariant: Variant is the backend's name for a kernel's path
// ("" where the backend names none).
func TestDeviceVariant(t *testing.T) {
	d := DefaultDevice()
	if got, want := d.Variant("matmul"), d.b.Variant("matmul"); got != want {
		t.Errorf("Variant(matmul) = %q, backend says %q", got, want)
	}
}

// TestScopePath: kernels launched inside Scope carry its path on their
// KernelCall, nested scopes joined by "/", and each scope is reported to
// the same observer as it ends (innermost first), also when fn panics.
// Without an observer Scope only calls fn.
func TestScopePath(t *testing.T) {
	x := Ones(4)
	var kernels, ended []string
	prev := SetObserver(Observer{
		Kernel: func(c KernelCall) { kernels = append(kernels, c.Kernel+"@"+c.Scope) },
		Scope: func(s ScopeSpan) {
			if s.Start.IsZero() || s.Duration < 0 {
				t.Errorf("%s: start %v, duration %v", s.Path, s.Start, s.Duration)
			}
			ended = append(ended, s.Path)
		},
	})
	defer SetObserver(prev)
	x.Neg()
	Scope("blocks", func() {
		ScopeIndexed("layer", 2, func() {
			x.Exp()
			Scope("attn", func() { x.Neg() })
		})
		x.Exp()
	})
	func() {
		defer func() { recover() }()
		Scope("boom", func() { panic("x") })
	}()
	x.Neg()
	want := []string{"unary.neg@", "unary.exp@blocks/layer.2", "unary.neg@blocks/layer.2/attn", "unary.exp@blocks", "unary.neg@"}
	if !slices.Equal(kernels, want) {
		t.Errorf("kernels %q, want %q", kernels, want)
	}
	if want := []string{"blocks/layer.2/attn", "blocks/layer.2", "blocks", "boom"}; !slices.Equal(ended, want) {
		t.Errorf("scopes ended %q, want %q", ended, want)
	}

	SetObserver(Observer{})
	ran := false
	Scope("quiet", func() { ran = currentScope() == "" })
	if !ran {
		t.Error("without an observer Scope did not call fn, or built the path")
	}
}

// TestObserverKernelOnly: an observer of kernels alone (no Scope func)
// still gets their scope paths.
func TestObserverKernelOnly(t *testing.T) {
	x := Ones(2)
	var scopes []string
	prev := SetObserver(Observer{Kernel: func(c KernelCall) { scopes = append(scopes, c.Scope) }})
	defer SetObserver(prev)
	Scope("a", func() { x.Neg() })
	if !slices.Equal(scopes, []string{"a"}) {
		t.Errorf("scopes %q", scopes)
	}
	if got := SetObserver(prev); got.Kernel == nil || got.Scope != nil {
		t.Error("SetObserver did not return the observer installed")
	}
}
