package emu

import (
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/forgeml/forge/kernels"
)

// TestStrictRefuses plants, in a small kernel file, each construct Apple's
// Metal compiler refuses and clang with the shim accepted, and checks the
// refusal names the file, the line and the problem.
func TestStrictRefuses(t *testing.T) {
	cases := []struct {
		name, src, where, msg string
	}{
		{"struct field half", "struct P {\n    uint n;\n    uint half;\n};", "t.metal:3", `"half" is a scalar type`},
		{"member use p.half", "struct P { uint n; };\nuint f(constant P& p) { return p.half; }", "t.metal:2", `"half" is a scalar type`},
		{"variable bfloat", "void f() {\n    float bfloat = 1;\n}", "t.metal:2", `"bfloat" is a scalar type`},
		{"parameter float4", "float f(float float4) { return float4; }", "t.metal:1", `"float4" is a vector type`},
		{"function named vec", "float vec(float x) { return x; }", "t.metal:1", `"vec" is a vector type`},
		{"type named matrix", "\nstruct matrix { float a; };", "t.metal:2", `"matrix" is a matrix type`},
		{"typedef half3x3", "typedef float half3x3;", "t.metal:1", `"half3x3" is a matrix type`},
		{"using packed_float3", "using packed_float3 = float;", "t.metal:1", `"packed_float3" is a packed vector type`},
		{"template parameter uchar2", "template <typename uchar2> uchar2 id(uchar2 x) { return x; }", "t.metal:1", `"uchar2" is a vector type`},
		{"pointer named device", "void f(thread float* device) {}", "t.metal:1", `"device" is an address space`},
		{"variable threadgroup", "void f() { int threadgroup = 0; }", "t.metal:1", `"threadgroup" is an address space`},
		{"field constant", "struct S { float constant; };", "t.metal:1", `"constant" is an address space`},
		{"field thread", "struct S { float thread[4]; };", "t.metal:1", `"thread" is an address space`},
		{"variable kernel", "void f() { int kernel = 0; }", "t.metal:1", `"kernel" is a function qualifier`},
		{"variable fragment", "void f() { int a, fragment; }", "t.metal:1", `"fragment" is a function qualifier`},
		{"variable sampler", "void f() { int sampler = 0; }", "t.metal:1", `"sampler" is the sampler type`},
		{"variable texture2d", "void f() { int texture2d; }", "t.metal:1", `"texture2d" is a texture type`},
		{"bit-field ray_data", "struct S { uint ray_data : 4; };", "t.metal:1", `"ray_data" is an address space`},
		{"vector template field", "struct S { vec<float, 2> uint2; };", "t.metal:1", `"uint2" is a vector type`},
		{"template parameter int half", "template <int half> int f(int x) { return x; }", "t.metal:1", `"half" is a scalar type`},
		{"direct recursion", "uint fact(uint n) {\n    return n < 2 ? 1 : n * fact(n - 1);\n}", "t.metal:2", "fact calls itself: MSL has no recursion"},
		{"mutual recursion", "uint odd(uint n);\nuint even(uint n) { return n == 0 ? 1 : odd(n - 1); }\nuint odd(uint n) {\n  return n == 0 ? 0 : even(n - 1);\n}", "t.metal:2", "even is recursive (even → odd → even)"},
		{"template recursion", "template <int N> int g(int x) { return x; }\nint h(int x) {\n  return g<2>(x) + h(x - 1);\n}", "t.metal:3", "h calls itself"},
		{"function pointer variable", "float sq(float x) { return x * x; }\nvoid f() {\n  float (*p)(float) = sq;\n}", "t.metal:3", "function pointers"},
		{"function pointer type", "using fn = float (*)(float);", "t.metal:1", "function pointers"},
		{"throw", "void f(int x) {\n  if (x) throw 1;\n}", "t.metal:2", "exceptions are not part of MSL"},
		{"try", "void f() { try { } catch (...) { } }", "t.metal:1", "exceptions are not part of MSL"},
		{"new", "struct S { int a; };\nvoid f() { S* s = new S; }", "t.metal:2", "MSL has no new or delete"},
		{"delete", "void f(thread int* p) {\n\n  delete p;\n}", "t.metal:3", "MSL has no new or delete"},
		{"virtual", "struct S {\n  virtual float f() { return 0; }\n};", "t.metal:2", "MSL has no virtual functions"},
		{"goto", "void f() {\nagain:\n  goto again;\n}", "t.metal:3", "MSL has no goto"},
		{"thread_local", "thread_local int n;", "t.metal:1", "MSL has no thread_local"},
		{"dynamic_cast", "struct A { };\nvoid f(thread A* a) { dynamic_cast<thread A*>(a); }", "t.metal:2", "run-time type information"},
		{"typeid", "void f() { typeid(int); }", "t.metal:1", "run-time type information"},
		{"pointer parameter", "float f(float* p) { return p[0]; }", "t.metal:1", "pointer parameter has no address space"},
		{"reference parameter", "void f(int n,\n       float& c) { c = 1; }", "t.metal:2", "reference parameter has no address space"},
		{"pointer cast", "void f(device float* p) {\n  device uint* q = (uint*)p;\n}", "t.metal:2", "pointer in a cast has no address space"},
		{"pointer variable", "void f(device float* p) {\n  const float* q = p;\n}", "t.metal:2", "pointer variable has no address space"},
		{"double", "float f(float x) {\n  double d = x;\n  return d;\n}", "t.metal:2", "MSL has no double"},
		{"long long", "struct S {\n  long long n;\n};", "t.metal:2", "MSL has no double, long double or long long"},
		{"threadgroup initializer", "kernel void k(uint i [[thread_position_in_grid]]) {\n  threadgroup float s[4] = {0, 0, 0, 0};\n}", "t.metal:2", "a threadgroup variable cannot have an initializer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := "#include <metal_stdlib>\nusing namespace metal;\n#line 1 \"t.metal\"\n" + c.src + "\n"
			err := strictCheck("t.metal", src)
			if err == nil {
				t.Fatalf("accepted:\n%s", c.src)
			}
			if !strings.HasPrefix(err.Error(), c.where+": ") || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %q, want %s: …%s…", err, c.where, c.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("more than one line: %q", err)
			}
		})
	}
}

// TestStrictAccepts: what MSL allows and the check must not refuse.
func TestStrictAccepts(t *testing.T) {
	for _, src := range []string{
		"half f(half x) { return half(x) * x; }",
		"float4 g(float4 a) { return float4(a.x) + a * float4(2); }",
		"kernel void k(device half* y [[buffer(0)]], const device float4* x [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = half(x[i].x); }",
		"template [[host_name(\"k_f16\")]] [[kernel]] void kt<half>(device half*, uint);",
		"uint f(uint x) { return x > uint(2) ? static_cast<uint>(x) : as_type<uint>(float(x)); }",
		"struct S { S(const thread S&) = delete; float a; };",
		"float f(float x) { return metal::precise::sqrt(x) * metal::fast::exp(x); }",
		"void f(threadgroup float* t) { threadgroup float s[4]; threadgroup float* p = t; s[0] = p[0]; }",
		"float h(float x) { return x; }\nfloat4 h(float4 v) { return float4(h(v.x), h(v.y), h(v.z), h(v.w)); }", // overloads
		"simdgroup_matrix<half, 8, 8> m; vec<float, 4> v; matrix<float, 2, 2> w;",
		"template <typename T> void f(const device T* x) { typedef vec<T, 4> T4; T4 a = ((const device T4*)x)[0]; }",
		"float f(float a, float b) { return a * float(b) + (a > b ? half(a) : half(b)); }",
		"void f() { for (uint i = 0; i < 4; i++) { } }",
		"void f(thread float& c, device const float* p, threadgroup float* t) { const device float* q = p; thread float* r = &c; device uint* u = (device uint*)p; }",
		"template <typename T> void f(T* p) { T* q = p; }",
		"float f(float a, float b) { float x = a * b; x = x * 2; return x * (a); }",
		"struct S { float v; float get() const { return v; } };",
		"namespace my {\nfloat exp(float x) { return metal::exp(x); }\n}",
		"struct A { float x; A(float v) : x(v) {} operator half() const { return half(x); } };",
		"uint n(thread float* p) { return sizeof(float) + sizeof(p); }",
	} {
		if err := strictCheck("t.metal", src); err != nil {
			t.Errorf("%s: refused: %v", src, err)
		}
	}
}

// TestStrictKernels: every Forge kernel file (with its prelude) passes.
func TestStrictKernels(t *testing.T) {
	src := kernels.Sources()
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := strictCheck(n, src[n]); err != nil {
			t.Error(err)
		}
	}
	if len(names) < 14 {
		t.Errorf("%d kernel sources, want all of them", len(names))
	}
}

// TestStrictLineFiles: an error in the prelude names the header, not the
// kernel file.
func TestStrictLineFiles(t *testing.T) {
	src := "#line 1 \"forge_half.h\"\nfloat ok(float x) { return x; }\nstruct S { uint half; };\n#line 1 \"a.metal\"\nfloat b(float x) { return x; }\n"
	err := strictCheck("a.metal", src)
	if err == nil || !strings.HasPrefix(err.Error(), "forge_half.h:2: ") {
		t.Errorf("got %v, want forge_half.h:2: …", err)
	}
}

// TestStrictOpen: Open refuses a file the check refuses, naming file:line
// (clang with the shim compiled it before the check), and the error is not
// ErrUnavailable: tests fail on it rather than skip.
func TestStrictOpen(t *testing.T) {
	testDriver(t) // skips without clang
	src := "#include <metal_stdlib>\nusing namespace metal;\n" +
		"struct P { uint n; uint half; };\n" +
		"kernel void k(device uint* x [[buffer(0)]], constant P& p [[buffer(1)]]) { x[0] = p.n + p.half; }\n"
	_, err := Open(map[string]string{"p.metal": src}, Options{CacheDir: t.TempDir()})
	if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `p.metal:3: "half" is a scalar type`) {
		t.Errorf("a struct field named half: %v", err)
	}
}

// TestShimNotMSL: the math functions of C and OpenCL that metal_stdlib does
// not declare do not compile in the emulator (they would not on a Mac),
// while their MSL neighbours do.
func TestShimNotMSL(t *testing.T) {
	testDriver(t) // skips without clang
	for _, call := range []string{"log1p(v)", "expm1(v)", "erf(v)", "erfc(v)", "pown(v, 2)"} {
		name := call[:strings.IndexByte(call, '(')]
		src := "#include <metal_stdlib>\nusing namespace metal;\n" +
			"kernel void k(device float* x [[buffer(0)]]) {\n    float v = x[0];\n    x[0] = " + call + ";\n}\n"
		_, err := Open(map[string]string{"m.metal": src}, Options{CacheDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "m.metal:5") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want a compile error at m.metal:5 naming %s", call, err, name)
		}
	}
	src := "#include <metal_stdlib>\nusing namespace metal;\n" +
		"kernel void k(device float* x [[buffer(0)]]) { float v = x[0]; x[0] = log(v) + exp(v) + powr(v, 2.0f) + rsqrt(v) + exp10(v); }\n"
	if _, err := Open(map[string]string{"ok.metal": src}, Options{CacheDir: t.TempDir()}); err != nil {
		t.Errorf("MSL math: %v", err)
	}
}
