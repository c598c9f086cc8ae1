package profile

import (
	"encoding/json"
	"io"
	"time"
)

// Trace layout: process 1 is the host, with host phases (TimeHost) on
// thread 1 and scopes on thread 2; each device is a process of its own
// (2, 3, …, in order of first appearance) with its kernels on thread 1.
const (
	hostPID      = 1
	hostPhaseTID = 1
	hostScopeTID = 2
	kernelTID    = 1
)

// traceEvent is one event of the Chrome trace event format ("JSON object
// format"): https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`            // µs since the recording began
	Dur  *float64       `json:"dur,omitempty"` // µs, complete ("X") events
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

type traceFile struct {
	TraceEvents     []traceEvent   `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	OtherData       map[string]any `json:"otherData,omitempty"`
}

// WriteTrace writes the profile as a Chrome trace (the JSON object format
// read by Perfetto, ui.perfetto.dev, and chrome://tracing): one complete
// event per kernel with ts and dur in microseconds, one process per device
// with a "kernels" thread, the kernel's phase (forward, backward,
// optimizer) as its category and its variant, shapes, dtype, FLOPs, bytes
// and scope as arguments; host phases and scopes on a "host" process.
func (p *Profile) WriteTrace(w io.Writer) error {
	us := func(t time.Time) float64 { return float64(t.Sub(p.Start).Nanoseconds()) / 1e3 }
	dur := func(d time.Duration) *float64 { v := float64(d.Nanoseconds()) / 1e3; return &v }
	meta := func(name string, pid, tid int, value any) traceEvent {
		return traceEvent{Name: name, Ph: "M", PID: pid, TID: tid, Args: map[string]any{"name": value}}
	}
	evs := []traceEvent{
		meta("process_name", hostPID, 0, "host"),
		meta("thread_name", hostPID, hostPhaseTID, "host phases"),
		meta("thread_name", hostPID, hostScopeTID, "scopes"),
		{Name: "process_sort_index", Ph: "M", PID: hostPID, Args: map[string]any{"sort_index": 0}},
	}
	pids := map[string]int{}
	for _, r := range p.Records {
		pid, ok := pids[r.Device]
		if !ok {
			pid = hostPID + 1 + len(pids)
			pids[r.Device] = pid
			evs = append(evs,
				meta("process_name", pid, 0, r.Device),
				meta("thread_name", pid, kernelTID, "kernels"),
				traceEvent{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}})
		}
		args := map[string]any{
			"variant": r.Variant, "shapes": formatShapes(r.Shapes), "dtype": r.DType.String(),
			"flops": r.FLOPs, "bytes": r.Bytes,
		}
		if r.Scope != "" {
			args["scope"] = r.Scope
		}
		evs = append(evs, traceEvent{Name: r.Kernel, Cat: r.Phase.String(), Ph: "X", Ts: us(r.Start), Dur: dur(r.Duration), PID: pid, TID: kernelTID, Args: args})
	}
	for _, s := range sortedSpans(p.Spans) {
		evs = append(evs, traceEvent{Name: s.Name, Cat: s.Name, Ph: "X", Ts: us(s.Start), Dur: dur(s.Duration), PID: hostPID, TID: hostPhaseTID})
	}
	for _, s := range sortedSpans(p.Scopes) {
		evs = append(evs, traceEvent{Name: s.Name, Cat: "scope", Ph: "X", Ts: us(s.Start), Dur: dur(s.Duration), PID: hostPID, TID: hostScopeTID})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(traceFile{
		TraceEvents: evs, DisplayTimeUnit: "ms",
		OtherData: map[string]any{
			"generator": "forge profile", "start": p.Start.UTC().Format(time.RFC3339Nano),
			"wall_us": float64(p.Wall.Nanoseconds()) / 1e3, "kernel_us": float64(p.KernelTime().Nanoseconds()) / 1e3,
			"iterations": max(p.Iterations, 1),
		},
	})
}
