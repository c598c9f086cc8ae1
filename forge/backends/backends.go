// Package backends registers every backend this build has, for programs
// and tests that create tensors:
//
//	import _ "github.com/forgeml/forge/forge/backends"
//
// forge itself imports only forge/backend, the interface (DESIGN.md:
// registration, not import), so that the implementations depend on the
// interface and not the other way round. Registered here: "cpu"
// (forge/cpu) and the Metal backends (metal: "metal" on macOS, and the
// "metal-emu" and recording drivers used to test it elsewhere).
// The default device among them is Metal on Apple silicon when it opens,
// else the CPU; FORGE_BACKEND or forge.UseDevice picks another.
package backends

import (
	_ "github.com/forgeml/forge/forge/cpu" // "cpu"
	_ "github.com/forgeml/forge/metal"     // "metal", "metal-emu", …
)
