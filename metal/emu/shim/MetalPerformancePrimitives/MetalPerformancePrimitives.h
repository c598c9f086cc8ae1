// Stub: the emulator force-includes forge_tensor_ops.h into files that include this.
