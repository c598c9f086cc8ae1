//go:build darwin && arm64

package metal

import "github.com/forgeml/forge/metal/driver"

var _ driver.GPUCores = (*metalDriver)(nil)

// GPUCores implements driver.GPUCores from the device's name and the table
// of Apple's chips (driver.GPUCoresByName): the fewest cores the named chip
// ships with, 0 for a name the table does not know. (The exact count is in
// the IORegistry's "gpu-core-count" property, which needs IOKit; the
// table is enough to size split-K products.) Checked by cross-compiling
// only: this has not run on Apple hardware.
func (d *metalDriver) GPUCores() int { return driver.GPUCoresByName(d.name) }
