package forgetest

// The suite's tests run on the device named by FORGE_BACKEND; importing
// the Metal backend registers "metal" (macOS on Apple silicon) and
// "metal-emu" (its kernels run on the CPU by the emulation driver).
import _ "github.com/forgeml/forge/metal"
