package notebook

// A notebook that imports this package can create tensors on every
// backend of the build without importing one itself.
import _ "github.com/forgeml/forge/forge/backends"
