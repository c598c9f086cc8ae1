package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/forgeml/forge/forge"
)

type parsedEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

func TestTraceStructure(t *testing.T) {
	p := synthetic()
	p.Records[0].Scope = "blocks.0"
	p.Spans = []Span{{Name: "data", Start: t0.Add(-500_000), Duration: 400_000}} // 0.5 ms before, 0.4 ms long
	p.Scopes = []Span{{Name: "blocks.0", Start: t0, Duration: 2 * ms}}
	var buf bytes.Buffer
	if err := p.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents     []parsedEvent  `json:"traceEvents"`
		DisplayTimeUnit string         `json:"displayTimeUnit"`
		OtherData       map[string]any `json:"otherData"`
	}
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if f.DisplayTimeUnit != "ms" || f.OtherData["wall_us"] != 25000.0 || f.OtherData["kernel_us"] != 19000.0 {
		t.Errorf("header: unit %q, other %v", f.DisplayTimeUnit, f.OtherData)
	}
	procs := map[int]string{}      // pid → process name
	threads := map[[2]int]string{} // (pid, tid) → thread name
	var kernels, host []parsedEvent
	for _, e := range f.TraceEvents {
		switch e.Ph {
		case "M":
			switch e.Name {
			case "process_name":
				procs[e.PID] = e.Args["name"].(string)
			case "thread_name":
				threads[[2]int{e.PID, e.TID}] = e.Args["name"].(string)
			case "process_sort_index":
			default:
				t.Errorf("unknown metadata event %+v", e)
			}
		case "X":
			if e.Dur == nil {
				t.Errorf("complete event without dur: %+v", e)
			}
			if procs[e.PID] == "host" {
				host = append(host, e)
			} else {
				kernels = append(kernels, e)
			}
		default:
			t.Errorf("unexpected phase %q", e.Ph)
		}
	}
	if len(kernels) != len(p.Records) || len(host) != 2 {
		t.Fatalf("%d kernel events (want %d), %d host events (want 2)", len(kernels), len(p.Records), len(host))
	}
	for i, e := range kernels {
		r := p.Records[i]
		if procs[e.PID] != "test" || threads[[2]int{e.PID, e.TID}] != "kernels" {
			t.Errorf("kernel %d on process %q thread %q", i, procs[e.PID], threads[[2]int{e.PID, e.TID}])
		}
		wantTs := float64(r.Start.Sub(t0).Microseconds())
		wantDur := float64(r.Duration.Microseconds())
		if e.Name != r.Kernel || e.Cat != r.Phase.String() || e.Ts != wantTs || *e.Dur != wantDur {
			t.Errorf("kernel %d: %s/%s ts %v dur %v, want %s/%s %v %v", i, e.Name, e.Cat, e.Ts, *e.Dur, r.Kernel, r.Phase, wantTs, wantDur)
		}
		if e.Args["variant"] != r.Variant || e.Args["shapes"] != formatShapes(r.Shapes) || e.Args["dtype"] != "float32" ||
			e.Args["flops"] != float64(r.FLOPs) || e.Args["bytes"] != float64(r.Bytes) {
			t.Errorf("kernel %d args %v", i, e.Args)
		}
	}
	if kernels[0].Args["scope"] != "blocks.0" || kernels[1].Args["scope"] != nil {
		t.Errorf("scope args: %v, %v", kernels[0].Args["scope"], kernels[1].Args["scope"])
	}
	cats := map[string]bool{}
	for _, e := range kernels {
		cats[e.Cat] = true
	}
	if !cats["forward"] || !cats["backward"] || !cats["optimizer"] || len(cats) != 3 {
		t.Errorf("categories %v", cats)
	}
	data, scope := host[0], host[1]
	if data.Name != "data" || data.Ts != -500 || *data.Dur != 400 || threads[[2]int{data.PID, data.TID}] != "host phases" {
		t.Errorf("data span %+v on %q", data, threads[[2]int{data.PID, data.TID}])
	}
	if scope.Name != "blocks.0" || scope.Cat != "scope" || *scope.Dur != 2000 || threads[[2]int{scope.PID, scope.TID}] != "scopes" {
		t.Errorf("scope span %+v", scope)
	}
}

func TestTraceTwoDevices(t *testing.T) {
	a := call("matmul", "", forge.PhaseForward, 0, ms, 1, 1)
	b := a
	b.Device = "gpu"
	var buf bytes.Buffer
	FromCalls(t0, 2*ms, a, b).WriteTrace(&buf)
	var f struct{ TraceEvents []parsedEvent }
	json.Unmarshal(buf.Bytes(), &f)
	pidOf := map[string]int{}
	for _, e := range f.TraceEvents {
		if e.Name == "process_name" {
			pidOf[e.Args["name"].(string)] = e.PID
		}
	}
	if len(pidOf) != 3 || pidOf["test"] == pidOf["gpu"] || pidOf["host"] == pidOf["test"] {
		t.Errorf("processes %v: want host, test and gpu apart", pidOf)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTraceWriteError(t *testing.T) {
	if err := synthetic().WriteTrace(failWriter{}); err == nil || err.Error() != "disk full" {
		t.Errorf("err = %v", err)
	}
}
