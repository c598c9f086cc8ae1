package metal

import (
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/kernels"
)

// Importing the package registers "metal" (the GPU, through
// Metal.framework) and "metal-emu" (the emulation driver, which runs the
// same kernels on the CPU; register_emu.go).
func init() {
	backend.Register("metal", func() (backend.Backend, error) {
		drv, err := openGPU()
		if err != nil {
			return nil, err
		}
		b := New(drv)
		b.compile.sources = kernels.Sources() // the pipeline cache's key
		return b, nil
	})
}
