// Package kernels holds the Metal Shading Language (MSL 3.1) sources of
// Forge's Metal backend and the rule that names their kernel functions.
//
// The .metal files are embedded in the binary: the Metal driver compiles
// them at run time (newLibraryWithSource) and the emulation driver
// (metal/emu) compiles the same text with clang on other systems, so the
// sources here are the single definition of every kernel.
//
// Every file is self-contained (each is compiled as a library of its own)
// and documents its parameter block and function constants. The kernels:
//
//	fill.metal     fill_x32             Backend.Fill (float32/int32 bits)
//	copy.metal     copy_x32             Backend.Copy (float32 ↔ int32)
//	unary.metal    unary_f32            Backend.Unary (op = constant 0)
//	               unary_grad_f32       Backend.UnaryGrad
//	binary.metal   binary_f32           Backend.Binary (op = constant 0)
//	               where_x32            Backend.Where
//	reduce.metal   reduce_f32           Backend.Reduce (op = constant 0)
//	softmax.metal  softmax_f32          Backend.Softmax
//	               softmax_backward_f32 Backend.SoftmaxBackward
//	matmul.metal   matmul_f32           Backend.MatMul, simdgroup_matrix tiles
//	               matmul_naive_f32     the reference / fallback
//
// The Go side that launches them is package metal (ops_*.go).
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.metal
var files embed.FS

// Sources returns every embedded kernel file: file name (e.g.
// "binary.metal") → MSL text. The map is a fresh copy on every call.
func Sources() map[string]string {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			panic(fmt.Sprintf("kernels: reading embedded %s: %v", n, err))
		}
		out[n] = string(b)
	}
	return out
}

// Files returns the embedded file names in sorted order.
func Files() []string {
	src := Sources()
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Name builds a kernel function name from its parts: each part is
// lower_snake_case ([a-z0-9] words joined by single underscores) and the
// parts are joined by "_". Name("binary", "f32") == "binary_f32". The Go
// side and the [[host_name]]s / function names in the .metal files follow
// this one rule. Name panics on an empty list or a part that is not
// lower_snake_case, so a typo cannot silently name a missing kernel.
func Name(parts ...string) string {
	if len(parts) == 0 {
		panic("kernels.Name: no parts")
	}
	for _, p := range parts {
		if !isLowerSnake(p) {
			panic(fmt.Sprintf("kernels.Name: part %q of %q is not lower_snake_case", p, parts))
		}
	}
	return strings.Join(parts, "_")
}

func isLowerSnake(s string) bool {
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '_':
			if s[i-1] == '_' {
				return false
			}
		default:
			return false
		}
	}
	return true
}
