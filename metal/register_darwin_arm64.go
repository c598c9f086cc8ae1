//go:build darwin && arm64

package metal

import (
	"github.com/forgeml/forge/kernels"
	"github.com/forgeml/forge/metal/driver"
)

// openGPU opens the system's default Metal device, with the embedded
// kernel sources compiled on first use.
func openGPU() (driver.Driver, error) { return openMetal(kernels.Sources()) }
