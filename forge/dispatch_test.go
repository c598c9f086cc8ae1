package forge

import (
	"testing"

	"github.com/forgeml/forge/forge/backend"
)

// plainBackend hides every optional interface of the backend it holds
// (an embedded interface promotes only the interface's own methods).
type plainBackend struct{ backend.Backend }

// TestDeviceVariant: Variant is the backend's name for a kernel's path,
// and "" where the backend does not name its paths.
func TestDeviceVariant(t *testing.T) {
	d := DefaultDevice()
	vn, ok := d.b.(backend.VariantNamer)
	if !ok {
		t.Skipf("backend %s names no paths", d.Name())
	}
	if got, want := d.Variant("matmul"), vn.Variant("matmul"); got != want || got == "" {
		t.Errorf("Variant(matmul) = %q, backend says %q", got, want)
	}
	backend.Register("forge-test-plain", func() (backend.Backend, error) { return plainBackend{d.b}, nil })
	plain, err := OpenDevice("forge-test-plain")
	if err != nil {
		t.Fatal(err)
	}
	if v := plain.Variant("matmul"); v != "" {
		t.Errorf("a backend without VariantNamer: Variant(matmul) = %q", v)
	}
}
