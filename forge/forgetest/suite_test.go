package forgetest_test

import (
	"flag"
	"testing"

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
