package notebook

// Programs that import this package can create tensors on every backend
// of the build. In GoNB, which drops the imports a cell does not use, a
// notebook's import cell should blank-import forge/backends itself
// (notebooks/README.md).
import _ "github.com/forgeml/forge/forge/backends"
