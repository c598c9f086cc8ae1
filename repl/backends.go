package repl

// The REPL creates tensors: it registers every backend of the build.
import _ "github.com/forgeml/forge/forge/backends"
