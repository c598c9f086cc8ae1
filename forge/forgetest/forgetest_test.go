package forgetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/forge/cpu"
)

// TestTorchParity runs the PyTorch parity suite on the backend named by
// FORGE_BACKEND (default "cpu").
func TestTorchParity(t *testing.T) { TorchParity(t, Device(t)) }

// noSoftmax is the CPU backend without its softmax kernel, to check that a
// missing kernel is reported by name.
type noSoftmax struct{ *cpu.Backend }

func (noSoftmax) Name() string { return "forgetest-nosoftmax" }

func (noSoftmax) Softmax(y, x backend.View, log bool) {
	panic(backend.ErrNotImplemented{Backend: "forgetest-nosoftmax", Kernel: "Softmax"})
}

func init() {
	backend.Register("forgetest-nosoftmax", func() (backend.Backend, error) { return noSoftmax{cpu.New()}, nil })
}

// TestTorchParityCanFail checks the checker: a perturbed expected value, a
// perturbed gradient and a missing kernel each fail a case that otherwise
// passes on the CPU.
func TestTorchParityCanFail(t *testing.T) {
	files, err := torchLoad()
	if err != nil {
		t.Fatal(err)
	}
	var c *torchCase
	for _, f := range files {
		for i := range f.Cases {
			if f.Cases[i].Name == "softmax/softmax_last_5x7" {
				c = &f.Cases[i]
			}
		}
	}
	if c == nil {
		t.Fatal("fixture softmax/softmax_last_5x7 not found")
	}
	dev, err := forge.OpenDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if r := torchRun(dev, c); r.failure != "" {
		t.Fatalf("unperturbed case fails: %s", r.failure)
	}

	// Move one expected value by 3·tol: the case must fail, naming it.
	out := *c
	out.Outputs = []torchArray{c.Outputs[0]}
	out.Outputs[0].Data = slices.Clone(c.Outputs[0].Data)
	out.Outputs[0].Data[7] += 3e-5
	if r := torchRun(dev, &out); !strings.Contains(r.failure, "forward: output maxdiff") || !strings.Contains(r.failure, "[1 0]") {
		t.Errorf("perturbed output: failure %q, want a forward mismatch at [1 0]", r.failure)
	}

	grad := *c
	g := *c.Grads[0]
	g.Data = slices.Clone(g.Data)
	g.Data[12] -= 3e-5
	grad.Grads = []*torchArray{&g}
	if r := torchRun(dev, &grad); !strings.Contains(r.failure, "backward: grad x maxdiff") {
		t.Errorf("perturbed gradient: failure %q, want a gradient mismatch", r.failure)
	}

	stub, err := forge.OpenDevice("forgetest-nosoftmax")
	if err != nil {
		t.Fatal(err)
	}
	want := "forward: kernel Softmax is not implemented on backend forgetest-nosoftmax"
	if r := torchRun(stub, c); r.failure != want {
		t.Errorf("missing kernel: failure %q, want %q", r.failure, want)
	}
}
