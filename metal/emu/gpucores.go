package emu

import "github.com/forgeml/forge/metal/driver"

var _ driver.GPUCores = (*Driver)(nil)

// GPUCores implements driver.GPUCores: 0 (unknown, so the backend assumes
// its default) unless SetGPUCores says otherwise. The emulator runs on the
// CPU; the count only steers decisions sized by the GPU, such as split-K.
func (d *Driver) GPUCores() int { return int(d.gpuCores.Load()) }

// SetGPUCores sets the count GPUCores reports (tests use it to see the
// backend's decisions follow the device; 0: unknown).
func (d *Driver) SetGPUCores(n int) { d.gpuCores.Store(int32(max(n, 0))) }
