//go:build !(darwin && arm64)

package metal

import (
	"errors"
	"runtime"

	"github.com/forgeml/forge/metal/driver"
)

// openGPU fails: Metal needs macOS on Apple silicon.
func openGPU() (driver.Driver, error) {
	return nil, errors.New("metal: the Metal backend needs macOS on Apple silicon (this is " +
		runtime.GOOS + "/" + runtime.GOARCH + "); FORGE_BACKEND=metal-emu runs the same kernels on the CPU")
}
