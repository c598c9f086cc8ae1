package forgetest_test

import (
	"flag"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/forgetest"
)

// TestProperties runs the property tests: -rapid.checks sets the number of
// cases per property (100 by default). A failure prints the -rapid.seed
// that reproduces it; no fail files are written into testdata unless
// -rapid.nofailfile=false is given.
func TestProperties(t *testing.T) {
	suiteNoFailFiles()
	forgetest.Properties(t, forgetest.Device(t))
}

// TestFused runs the fused training-step kernels' checks.
func TestFused(t *testing.T) { forgetest.Fused(t, forgetest.Device(t)) }

// TestHalfConversions runs the float16/bfloat16 storage and conversion
// checks.
func TestHalfConversions(t *testing.T) { forgetest.HalfConversions(t, forgetest.Device(t)) }

// TestQuant runs the Round and fake-quantisation checks.
func TestQuant(t *testing.T) { forgetest.Quant(t, forgetest.Device(t)) }

// TestBadInput runs the error-contract table.
func TestBadInput(t *testing.T) { forgetest.BadInput(t, forgetest.Device(t)) }

// suiteNoFailFiles turns rapid's fail files off unless the command line
// set the flag.
func suiteNoFailFiles() {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.nofailfile" {
			set = true
		}
	})
	if f := flag.Lookup("rapid.nofailfile"); f != nil && !set {
		_ = f.Value.Set("true")
	}
}

// TestComposed runs the suites that check values against independent
// references on the device without its optional kernels, so that every
// composed fallback is held to the references the fused kernels are.
func TestComposed(t *testing.T) {
	dev, err := forgetest.Composed(forgetest.Device(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range backend.OptionalKernels {
		for _, dt := range []forge.DType{forge.Float32, forge.Float64, forge.Float16, forge.BFloat16} {
			if dev.Supports(k, dt) {
				t.Fatalf("the composed device lists %s on %v", k, dt)
			}
		}
	}
	t.Run("TorchParity", func(t *testing.T) { forgetest.TorchParity(t, dev) })
	t.Run("GradCheck", func(t *testing.T) { forgetest.GradCheck(t, dev) })
	t.Run("Fused", func(t *testing.T) { forgetest.Fused(t, dev) })
}

// TestCapabilities checks the device's capability table against its
// kernels.
func TestCapabilities(t *testing.T) { forgetest.Capabilities(t, forgetest.Device(t)) }
