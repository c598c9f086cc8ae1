package train

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/forge/gpt"
)

// The precision setting: validated with the allowed values named; the
// CPU, which stores 16-bit floats but computes only in float32 and
// float64, refuses a 16-bit precision when the trainer is made, not with
// a kernel panic inside the first step; float32 leaves the model plain.
func TestPrecisionConfig(t *testing.T) {
	for _, p := range []string{"", "float32", "bfloat16", "float16"} {
		c := testRunConfig()
		c.Precision = p
		if err := c.Validate(); err != nil {
			t.Errorf("precision %q: %v", p, err)
		}
	}
	c := testRunConfig()
	c.Precision = "fp16"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `"float32", "bfloat16" or "float16"`) {
		t.Errorf("precision fp16: error %v, want one naming the allowed values", err)
	}
	if _, err := ParseConfig([]byte(`{"precision": "half", "tokenizer": "char"}`)); err == nil || !strings.Contains(err.Error(), "precision") {
		t.Errorf("JSON precision half: error %v", err)
	}
	c = testRunConfig()
	c.LossScale = 1000
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "power of two") {
		t.Errorf("loss_scale 1000: error %v, want one asking for a power of two", err)
	}
	c.LossScale, c.LossScaleWindow = 1024, -1
	if err := c.Validate(); err == nil {
		t.Errorf("loss_scale_window -1 accepted")
	}
	pc, err := ParseConfig([]byte(`{"precision": "float16", "loss_scale": 1024, "tokenizer": "char"}`))
	if err != nil || pc.ComputeDType() != forge.Float16 || pc.LossScale != 1024 {
		t.Errorf("JSON float16: %+v, %v", pc, err)
	}

	for _, p := range []string{"bfloat16", "float16"} {
		c := testRunConfig()
		c.Precision = p
		m, err := gpt.New(c.Model, 1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewTrainer(c, m, fixedBatch{}, nil)
		if err == nil || !strings.Contains(err.Error(), "cannot compute in") || !strings.Contains(err.Error(), p) {
			t.Errorf("precision %s on the CPU: error %v, want one saying the device cannot compute in it", p, err)
		}
		if m.Compute() != forge.Float32 || m.Blocks[0].MLP.Up.Compute != forge.Float32 {
			t.Errorf("precision %s on the CPU: the refused setting changed the model", p)
		}
		t.Logf("%s on the CPU: %v", p, err)
	}
	m, _ := gpt.New(testRunConfig().Model, 1)
	if _, err := NewTrainer(testRunConfig(), m, fixedBatch{}, nil); err != nil || m.Compute() != forge.Float32 {
		t.Errorf("float32: %v, compute %v", err, m.Compute())
	}
}

// A skipped step's non-finite norm survives metrics.jsonl; finite records
// are encoded as before.
func TestMetricsJSONNonFinite(t *testing.T) {
	for _, m := range []Metrics{
		{Step: 3, Loss: 4.5, GradNorm: 0.25, LR: 1e-3},
		{Step: 3, Loss: 4.5, GradNorm: math.NaN(), Skipped: true, LossScale: 65536},
		{Step: 3, Loss: math.Inf(1), GradNorm: math.Inf(-1), Skipped: true},
	} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		var back Metrics
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
		if !same(back.Loss, m.Loss) || !same(back.GradNorm, m.GradNorm) || back.Step != m.Step || back.Skipped != m.Skipped || back.LossScale != m.LossScale {
			t.Errorf("%s read back as %+v", b, back)
		}
		if finite(m.GradNorm) && !strings.HasPrefix(string(b), `{"step":3,"loss":4.5,"lr":0.001,"grad_norm":0.25,`) {
			t.Errorf("a finite record encodes as %s", b)
		}
	}
}

func TestSeriesLossScale(t *testing.T) {
	h := History{Steps: []Metrics{{Step: 1, Loss: 3}, {Step: 2, Loss: 2, LossScale: 65536}, {Step: 3, Loss: 1, LossScale: 32768}}}
	steps, vals, err := h.Series("loss_scale")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0] != 2 || vals[0] != 65536 || vals[1] != 32768 {
		t.Fatalf("loss_scale series: steps %v values %v; want the two float16 steps", steps, vals)
	}
	if _, _, err := h.Series("nosuch"); err == nil || !strings.Contains(err.Error(), "loss_scale") {
		t.Fatalf("unknown metric error %v does not list loss_scale", err)
	}
}
