package emu

import (
	"errors"
	"strings"
	"testing"

	"github.com/forgeml/forge/metal/driver"
)

// TestOpenErrors: a kernel that does not compile is an error naming its
// file and not ErrUnavailable (tests must fail on it, not skip), while a
// machine that cannot run the emulator gives an error that is
// ErrUnavailable and keeps its own message.
func TestOpenErrors(t *testing.T) {
	testDriver(t) // skips without clang
	src := "#include <metal_stdlib>\nusing namespace metal;\n" +
		"kernel void broken(device float* x [[buffer(0)]]) { x[0] = no_such_name; }\n"
	_, err := Open(map[string]string{"broken.metal": src}, Options{CacheDir: t.TempDir()})
	if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "broken.metal") {
		t.Errorf("a kernel that does not compile: %v (ErrUnavailable: %v)", err, errors.Is(err, ErrUnavailable))
	}
	u := unavailable(errors.New("metal-emu: no clang++ found on PATH"))
	if !errors.Is(u, ErrUnavailable) || u.Error() != "metal-emu: no clang++ found on PATH" {
		t.Errorf("unavailable: %q, ErrUnavailable %v", u, errors.Is(u, ErrUnavailable))
	}
}

// TestTensorOpsLevel: the emulator reports accelerated tensor ops (its shim
// runs them) unless FORGE_EMU_TENSOR_OPS=0; SetTensorOps overrides.
func TestTensorOpsLevel(t *testing.T) {
	testDriver(t) // skips without clang
	src := map[string]string{"k.metal": "#include <metal_stdlib>\nusing namespace metal;\n" +
		"kernel void k(device float* x [[buffer(0)]]) { x[0] = 1.0f; }\n"}
	for env, want := range map[string]driver.TensorOpsLevel{"": driver.TensorOpsAccelerated, "0": driver.TensorOpsNone} {
		t.Setenv("FORGE_EMU_TENSOR_OPS", env)
		d, err := Open(src, Options{CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.TensorOps(); got != want {
			t.Errorf("FORGE_EMU_TENSOR_OPS=%q: %v, want %v", env, got, want)
		}
		d.SetTensorOps(driver.TensorOpsSupported)
		if got := d.TensorOps(); got != driver.TensorOpsSupported {
			t.Errorf("after SetTensorOps: %v", got)
		}
		d.Close()
	}
}
