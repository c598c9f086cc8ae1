// Package configs embeds the named training configs (*.json beside this
// file) so the CLI, the REPL and notebooks can use them by name from any
// directory. Each file overrides fields of train.DefaultConfig; see
// forge/train.Config for the fields.
package configs

import (
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"
)

//go:embed *.json
var files embed.FS

// Names lists the embedded configs, sorted.
func Names() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(out)
	return out
}

// Get returns the JSON of the config called name.
func Get(name string) ([]byte, error) {
	b, err := files.ReadFile(path.Clean(name) + ".json")
	if err != nil {
		return nil, fmt.Errorf("configs: no config named %q; choose one of %s, or give a path to a .json file", name, strings.Join(Names(), ", "))
	}
	return b, nil
}
