package forgetest_test

import (
	"flag"
	"os"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/forgetest"
)

// suiteDevice opens the device named by FORGE_BACKEND (default "cpu").
func suiteDevice(t *testing.T) *forge.Device {
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

// TestProperties runs the property tests: -rapid.checks sets the number of
// cases per property (100 by default). A failure prints the -rapid.seed
// that reproduces it; no fail files are written into testdata unless
// -rapid.nofailfile=false is given.
func TestProperties(t *testing.T) {
	suiteNoFailFiles()
	forgetest.Properties(t, suiteDevice(t))
}

// TestBadInput runs the error-contract table.
func TestBadInput(t *testing.T) { forgetest.BadInput(t, suiteDevice(t)) }

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
