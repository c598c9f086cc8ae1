package cli

import (
	"strings"
	"testing"
)

// forge info shows a mixture of experts' shape and its active parameters.
func TestInfoMoE(t *testing.T) {
	r := runCLI("info", "--config", "gpt-50m-moe")
	for _, want := range []string{"swiglu × 8 experts top-2", "parameters: 50,373,120",
		"mixture of experts: 8 experts per block, top-2 per token, aux coef 0.01; 22,061,568 parameters active per token"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("info --config gpt-50m-moe lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
}
