package metal

import (
	"testing"

	"github.com/forgeml/forge/kernels"
)

func TestKernelIndex(t *testing.T) {
	idx, err := kernelIndex(map[string]string{
		"a.metal": "// kernel void commented(device float* x)\n" +
			"kernel void plain_f32(device float* x [[buffer(0)]]) {}\n" +
			"template <typename T> kernel void tmpl(device T* x) {}\n" +
			"template [[host_name(\"tmpl_f32\")]] kernel void tmpl<float>(device float* x);\n",
		"b.metal": "/* kernel void also_commented( */ kernel  void\nother(device int* x) {}\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"plain_f32": "a.metal", "tmpl": "a.metal", "tmpl_f32": "a.metal", "other": "b.metal"}
	for k, f := range want {
		if idx[k] != f {
			t.Errorf("%s → %q, want %q", k, idx[k], f)
		}
	}
	if len(idx) != len(want) {
		t.Errorf("index %v, want %v", idx, want)
	}
	if _, err := kernelIndex(map[string]string{"a.metal": "kernel void k(){}", "b.metal": "kernel void k(){}"}); err == nil {
		t.Error("a kernel defined twice was accepted")
	}
	// The embedded sources index without clashes and name some kernels.
	idx, err = kernelIndex(kernels.Sources())
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) == 0 {
		t.Fatal("no kernels found in the embedded sources")
	}
}
