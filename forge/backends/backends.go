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
// FORGE_BACKEND picks the default device among them.
package backends

import (
	_ "github.com/forgeml/forge/forge/cpu" // "cpu"
	_ "github.com/forgeml/forge/metal"     // "metal", "metal-emu", …
)
