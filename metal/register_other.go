//go:build !(darwin && arm64)

package metal

import (
	"errors"
	"runtime"

	"github.com/forgeml/forge/internal/rosetta"
	"github.com/forgeml/forge/metal/driver"
)

// openGPU fails: Metal needs macOS on Apple silicon, and an arm64 build
// there (an amd64 one runs under Rosetta, which has no Metal backend).
func openGPU() (driver.Driver, error) {
	if translated() {
		return nil, errors.New("metal: " + rosetta.Hint)
	}
	return nil, errors.New("metal: the Metal backend needs macOS on Apple silicon (this is " +
		runtime.GOOS + "/" + runtime.GOARCH + "); FORGE_BACKEND=metal-emu runs the same kernels on the CPU")
}

// translated is rosetta.Translated; the tests replace it.
var translated = rosetta.Translated
