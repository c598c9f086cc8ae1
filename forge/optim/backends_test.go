package optim

// The tests create tensors: register the backends (forge imports none).
import _ "github.com/forgeml/forge/forge/backends"
