package metal

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The Metal driver compiles one library per source file, lazily, the first
// time one of its kernels is needed (a library takes 50–100 ms to
// compile). kernelIndex tells it which file defines a kernel function:
// `kernel void name(` declares one, and a template instance's
// `[[host_name("name")]]` names another.

var (
	reKernelDecl = regexp.MustCompile(`\bkernel\s+void\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	reHostName   = regexp.MustCompile(`\[\[\s*host_name\s*\(\s*"([^"]+)"\s*\)\s*\]\]`)
	reComment    = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)
)

// kernelIndex maps every kernel function name of sources (file → MSL) to
// its file. A name defined in two files is an error.
func kernelIndex(sources map[string]string) (map[string]string, error) {
	files := make([]string, 0, len(sources))
	for f := range sources {
		files = append(files, f)
	}
	sort.Strings(files)
	idx := map[string]string{}
	for _, f := range files {
		src := reComment.ReplaceAllStringFunc(sources[f], func(c string) string {
			return strings.Repeat(" ", len(c)) // keep offsets; drop commented-out kernels
		})
		for _, re := range []*regexp.Regexp{reKernelDecl, reHostName} {
			for _, m := range re.FindAllStringSubmatch(src, -1) {
				name := m[1]
				if g, ok := idx[name]; ok && g != f {
					return nil, fmt.Errorf("metal: kernel %s is defined in both %s and %s", name, g, f)
				}
				idx[name] = f
			}
		}
	}
	return idx, nil
}
