package forge

import "github.com/forgeml/forge/forge/backend"

// CompileProgress is a report of a device compiling its kernels (Metal,
// before its first kernels run): see OnCompile.
type CompileProgress = backend.CompileProgress

// OnCompile installs f (nil removes it) to hear a device compile its
// kernels when that takes longer than a second — reports such as
// "compiling metal kernels: 7/13 libraries, 1.4 s" (CompileProgress's
// String), then one with Finished set — and returns the previous
// function. Front ends print them; a compile that is quick, or served
// from the pipeline cache, says nothing.
func OnCompile(f func(CompileProgress)) func(CompileProgress) {
	return backend.SetCompileObserver(f)
}
