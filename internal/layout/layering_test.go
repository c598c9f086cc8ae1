package layout

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/forgeml/forge/"

// The layering of DESIGN.md: forge (the API and autograd) → forge/backend
// (the interface) ← forge/cpu, metal (the implementations), which
// register through forge/backends; nn, gpt, optim and train use only
// forge's public API; forge/profile sits on forge, below the model and
// training packages; the front ends import no backend package beyond
// the registering one. forge/half (float16 and bfloat16 conversions) is a
// leaf anyone may use, as is internal/rosetta (whether the process runs
// translated, which the default device depends on) and internal/numfmt
// (byte and count formatting, for forge's budget refusals).
var (
	// implementations are the backend packages and what only they use.
	implementations = []string{"forge/cpu", "metal", "metal/*", "kernels", "forge/backends"}
	layering        = []struct {
		pkgs   []string // the packages the rule is about
		forbid []string // module packages they may not import (patterns)
		only   []string // if set: the only module packages they may import
	}{
		{pkgs: []string{"forge/backend"}, only: []string{"forge/half"}},
		{pkgs: []string{"forge"}, only: []string{"forge/backend", "forge/half", "internal/rosetta", "internal/numfmt"}},
		{pkgs: []string{"forge/cpu", "metal", "metal/*", "kernels"}, forbid: []string{"forge", "forge/nn", "forge/gpt", "forge/optim", "forge/train"}},
		{pkgs: []string{"forge/nn", "forge/gpt", "forge/optim", "forge/train"}, forbid: append([]string{"forge/backend"}, implementations...)},
		// The profiler is a low layer, beside forge: the model and training
		// packages may use it (train.BenchStep does), never the reverse.
		{pkgs: []string{"forge/profile"}, forbid: append([]string{"forge/nn", "forge/gpt", "forge/optim", "forge/train"}, implementations...)},
		{pkgs: []string{"cli", "repl", "notebook"}, forbid: []string{"forge/backend", "forge/cpu", "metal", "metal/*", "kernels"}},
		// The model repository is storage: it knows bytes, dtypes and
		// shapes, not tensors or models (forge/train bridges the two).
		{pkgs: []string{"forge/fmodel"}, only: []string{"forge/safetensors", "internal/atomicfile", "internal/flock"}},
		// forge doctor checks a device through its backend (kernel
		// compiles, the GPU family) and the whole stack above it; the
		// front ends call it, never the reverse.
		{pkgs: []string{"forge/doctor"}, forbid: []string{"cli", "repl", "notebook"}},
	}
)

// TestLayering reads the module's import graph (go list; test files
// aside) and fails on every import that breaks the layering above.
func TestLayering(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				graph[pkg] = append(graph[pkg], rel)
			}
		}
		if _, ok := graph[pkg]; !ok {
			graph[pkg] = nil
		}
	}
	if len(graph) < 20 {
		t.Fatalf("go list found %d packages of the module", len(graph))
	}
	for _, r := range layering {
		for pkg, imps := range graph {
			if !matchAny(pkg, r.pkgs) {
				continue
			}
			for _, imp := range imps {
				if matchAny(imp, r.forbid) || r.only != nil && !matchAny(imp, r.only) {
					t.Errorf("%s imports %s, which the layering forbids (DESIGN.md: forge → forge/backend ← cpu, metal; nn, gpt, optim, train use forge's public API; front ends register backends through forge/backends)", pkg, imp)
				}
			}
		}
	}
}

// matchAny reports whether pkg is one of patterns ("a/*" matches a's
// subpackages).
func matchAny(pkg string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		if prefix, ok := strings.CutSuffix(p, "/*"); ok {
			return strings.HasPrefix(pkg, prefix+"/")
		}
		return pkg == p
	})
}
