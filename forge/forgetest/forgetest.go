// Package forgetest is Forge's backend conformance suite: every op, forward
// and gradient, checked against independent references — PyTorch fixtures
// (TorchParity), float64 central differences (GradCheck), host-side
// reference implementations (Properties), the error contract (BadInput),
// the fused training-step kernels (Fused) and the conversions of the
// 16-bit float storage dtypes against package forge/half
// (HalfConversions). Each suite function takes the device to test, so
// every backend runs the same suite; the package's own tests pick the
// device from FORGE_BACKEND (default "cpu"; the tests import the Metal
// backend, so "metal" and "metal-emu" are available).
//
// Devices without float64 (Metal) run everything in float32: GradCheck
// then compares float32 analytic gradients on the device with float64
// central differences on the cpu device; the few BadInput cases that need
// a float64 tensor on the device are skipped with that reason. A check
// that reaches a kernel the backend does not implement
// (backend.ErrNotImplemented) fails, naming the kernel.
package forgetest

import (
	"os"
	"testing"

	"github.com/forgeml/forge/forge"
)

// Device opens the device named by FORGE_BACKEND (default "cpu"), failing
// the test if it cannot be opened.
func Device(t testing.TB) *forge.Device {
	t.Helper()
	name := os.Getenv("FORGE_BACKEND")
	if name == "" {
		name = "cpu"
	}
	dev, err := forge.OpenDevice(name)
	if err != nil {
		t.Fatalf("FORGE_BACKEND=%s: %v", name, err)
	}
	return dev
}

// Run runs the whole conformance suite on dev, one subtest per part.
func Run(t *testing.T, dev *forge.Device) {
	t.Run("TorchParity", func(t *testing.T) { TorchParity(t, dev) })
	t.Run("GradCheck", func(t *testing.T) { GradCheck(t, dev) })
	t.Run("Properties", func(t *testing.T) { Properties(t, dev) })
	t.Run("BadInput", func(t *testing.T) { BadInput(t, dev) })
	t.Run("Fused", func(t *testing.T) { Fused(t, dev) })
	t.Run("HalfConversions", func(t *testing.T) { HalfConversions(t, dev) })
}
