package profile

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forgeml/forge/forge"
)

// GroupBy chooses what one row of a report stands for.
type GroupBy string

const (
	GroupShape GroupBy = "shape" // kernel name + variant + operand shapes (the default)
	GroupName  GroupBy = "name"  // kernel name + variant, all shapes together
	GroupScope GroupBy = "scope" // scope path; kernels outside every scope by phase, e.g. "(backward)"
)

// SortBy orders the rows of a report.
type SortBy string

const (
	SortTotal SortBy = "total" // total time, largest first (the default)
	SortCalls SortBy = "calls" // number of calls, most first
	SortMean  SortBy = "mean"  // mean time per call, largest first
	SortName  SortBy = "name"  // alphabetical (kernel, then variant, shape, scope)
)

// ReportOptions shape a Report. The zero value groups by kernel and
// shape, sorts by total time, keeps every row and has no roofline.
type ReportOptions struct {
	Group   GroupBy // GroupShape (default), GroupName or GroupScope
	ByPhase bool    // one row per phase as well (matmul forward and backward apart)
	Sort    SortBy  // SortTotal (default), SortCalls, SortMean or SortName
	Top     int     // keep the first Top rows (0: all); the rest are summed in Omitted*
	// Peak places each kernel of Peak.Device on a roofline (usually
	// profile.Peak()); nil leaves the roofline columns out.
	Peak *Roofline
}

// Report is a profile summarised per kernel, in a form both the text
// table (String) and a notebook's table and chart are made from. Totals
// and call counts are per iteration of the profiled work (see
// Profile.Iterations); means, minima and maxima are per call. Shares are
// fractions (0.25 = 25 %).
type Report struct {
	Devices     []string      `json:"devices"`
	Iterations  int           `json:"iterations"`
	Wall        time.Duration `json:"wall_ns"`      // per iteration
	Kernel      time.Duration `json:"kernel_ns"`    // time inside kernels, per iteration
	Outside     time.Duration `json:"outside_ns"`   // Wall − Kernel: the framework's host overhead
	KernelShare float64       `json:"kernel_share"` // Kernel / Wall
	Calls       float64       `json:"calls"`        // kernel calls per iteration
	Phases      []PhaseRow    `json:"phases"`
	Rows        []Row         `json:"rows"`
	Group       GroupBy       `json:"group"`
	Sort        SortBy        `json:"sort"`
	ByPhase     bool          `json:"by_phase"`
	// Rows cut by Top: how many, and their summed time and share.
	Omitted      int           `json:"omitted"`
	OmittedTotal time.Duration `json:"omitted_ns"`
	OmittedShare float64       `json:"omitted_share"`
	Peak         *Roofline     `json:"peak,omitempty"` // the roofline used, if any
	// DeviceInfo says what each of Devices ran its kernels with, one line
	// each (forge.Device.Describe: for the CPU the BLAS library, its
	// kernels and who chose them); just the name for a device this process
	// cannot open.
	DeviceInfo []string `json:"device_info"`
}

// PhaseRow is the time of one phase. Kernel phases are "forward",
// "backward" and "optimizer"; host phases (TimeHost) such as "data" have
// no kernels. Outside is the host time attributed to the phase: each gap
// between kernels goes to the phase of the kernel (or host span) that
// follows it, and the time after the last one to the last phase, so the
// phases' Wall add up to the report's Wall.
type PhaseRow struct {
	Phase   string        `json:"phase"`
	Calls   float64       `json:"calls"`
	Kernel  time.Duration `json:"kernel_ns"`
	Outside time.Duration `json:"outside_ns"`
	Wall    time.Duration `json:"wall_ns"`
	Share   float64       `json:"share"` // of the report's Wall
}

// Row is one kernel (or scope) of a report.
type Row struct {
	Kernel  string `json:"kernel,omitempty"`  // kernel name ("" when grouped by scope)
	Variant string `json:"variant,omitempty"` // code path, e.g. "openblas"
	Shape   string `json:"shape,omitempty"`   // operand shapes, inputs then outputs (GroupShape)
	Scope   string `json:"scope,omitempty"`   // scope path (GroupScope)
	Phase   string `json:"phase,omitempty"`   // when ByPhase
	Device  string `json:"device"`

	Calls float64       `json:"calls"`    // per iteration
	Total time.Duration `json:"total_ns"` // per iteration
	Mean  time.Duration `json:"mean_ns"`  // per call
	Min   time.Duration `json:"min_ns"`
	Max   time.Duration `json:"max_ns"`
	Share float64       `json:"share"` // of the kernel time
	// Wall is a scope's own wall time per iteration, kernels and host work
	// inside it (GroupScope; 0 for the phase rows such as "(backward)").
	Wall time.Duration `json:"wall_ns,omitempty"`

	FLOPs  float64 `json:"flops"`  // per iteration
	Bytes  float64 `json:"bytes"`  // per iteration
	GFLOPS float64 `json:"gflops"` // achieved: FLOPs / time
	GBps   float64 `json:"gbps"`   // achieved: bytes / time

	// The roofline (empty without a peak for the device). Intensity is
	// FLOPs per byte; Attainable = min(peak GFLOP/s, Intensity × peak GB/s);
	// Bound is "compute" at or above the ridge point (peak GFLOP/s ÷ peak
	// GB/s), "memory" below it; PctRoof is the fraction of the attainable
	// rate achieved: max(FLOPs/peak GFLOP/s, bytes/peak GB/s) ÷ time.
	Intensity  float64 `json:"intensity"`
	Attainable float64 `json:"attainable_gflops,omitempty"`
	Bound      string  `json:"bound,omitempty"`
	PctRoof    float64 `json:"pct_roof,omitempty"`
}

// Label is the row's name as the text table shows it: the scope, or the
// kernel and its variant.
func (r Row) Label() string {
	if r.Kernel == "" {
		return r.Scope
	}
	if r.Variant == "" {
		return r.Kernel
	}
	return r.Kernel + " (" + r.Variant + ")"
}

type rowKey struct{ device, kernel, variant, shape, scope, phase string }

type acc struct {
	calls        int
	total        time.Duration
	min, max     time.Duration
	flops, bytes int64
}

// Report summarises the profile; see ReportOptions.
func (p *Profile) Report(opts ReportOptions) *Report {
	if opts.Group == "" {
		opts.Group = GroupShape
	}
	if opts.Sort == "" {
		opts.Sort = SortTotal
	}
	it := max(p.Iterations, 1)
	per := func(d time.Duration) time.Duration { return d / time.Duration(it) }
	rep := &Report{Iterations: it, Group: opts.Group, Sort: opts.Sort, ByPhase: opts.ByPhase}

	groups := map[rowKey]*acc{}
	var order []rowKey
	var kernel time.Duration
	for _, r := range p.Records {
		if !slices.Contains(rep.Devices, r.Device) {
			rep.Devices = append(rep.Devices, r.Device)
		}
		k := rowKey{device: r.Device}
		switch opts.Group {
		case GroupScope:
			k.scope = r.Scope
			if k.scope == "" {
				k.scope = "(" + r.Phase.String() + ")"
			}
		case GroupName:
			k.kernel, k.variant = r.Kernel, r.Variant
		default:
			k.kernel, k.variant, k.shape = r.Kernel, r.Variant, formatShapes(r.Shapes)
		}
		if opts.ByPhase {
			k.phase = r.Phase.String()
		}
		a := groups[k]
		if a == nil {
			a = &acc{min: r.Duration, max: r.Duration}
			groups[k] = a
			order = append(order, k)
		}
		a.calls++
		a.total += r.Duration
		a.min, a.max = min(a.min, r.Duration), max(a.max, r.Duration)
		a.flops += r.FLOPs
		a.bytes += r.Bytes
		kernel += r.Duration
	}

	rep.Peak = opts.Peak
	for _, name := range rep.Devices {
		rep.DeviceInfo = append(rep.DeviceInfo, describeDevice(name))
	}
	rep.Wall, rep.Kernel = per(p.Wall), per(kernel)
	rep.Outside = rep.Wall - rep.Kernel
	rep.Calls = float64(len(p.Records)) / float64(it)
	if p.Wall > 0 {
		rep.KernelShare = float64(kernel) / float64(p.Wall)
	}

	for _, k := range order {
		a := groups[k]
		row := Row{
			Kernel: k.kernel, Variant: k.variant, Shape: k.shape, Scope: k.scope, Phase: k.phase, Device: k.device,
			Calls: float64(a.calls) / float64(it), Total: per(a.total),
			Mean: a.total / time.Duration(a.calls), Min: a.min, Max: a.max,
			FLOPs: float64(a.flops) / float64(it), Bytes: float64(a.bytes) / float64(it),
		}
		if kernel > 0 {
			row.Share = float64(a.total) / float64(kernel)
		}
		if s := a.total.Seconds(); s > 0 {
			row.GFLOPS = float64(a.flops) / s / 1e9
			row.GBps = float64(a.bytes) / s / 1e9
		}
		roofline(&row, a, rep.Peak)
		rep.Rows = append(rep.Rows, row)
	}
	if opts.Group == GroupScope {
		wall := map[string]time.Duration{}
		for _, s := range p.Scopes {
			wall[s.Name] += s.Duration
		}
		for i := range rep.Rows {
			rep.Rows[i].Wall = per(wall[rep.Rows[i].Scope])
		}
	}
	sortRows(rep.Rows, opts.Sort)
	if opts.Top > 0 && len(rep.Rows) > opts.Top {
		for _, r := range rep.Rows[opts.Top:] {
			rep.Omitted++
			rep.OmittedTotal += r.Total
			rep.OmittedShare += r.Share
		}
		rep.Rows = rep.Rows[:opts.Top]
	}
	rep.Phases = p.phases()
	return rep
}

// describeDevice is the named device's Describe line, or the name when
// this process cannot open it (a recording made elsewhere, a test).
func describeDevice(name string) string {
	d, err := forge.OpenDevice(name)
	if err != nil {
		return name
	}
	return d.Describe()
}

// roofline fills the roofline columns of row from the peak of its device.
func roofline(row *Row, a *acc, pk *Roofline) {
	if a.bytes > 0 {
		row.Intensity = float64(a.flops) / float64(a.bytes)
	}
	if pk == nil || pk.Device != row.Device || pk.GFLOPS <= 0 || pk.GBps <= 0 || a.total <= 0 || (a.flops == 0 && a.bytes == 0) {
		return
	}
	ridge := pk.GFLOPS / pk.GBps
	row.Bound = "memory"
	if a.bytes == 0 || row.Intensity >= ridge {
		row.Bound = "compute"
	}
	row.Attainable = pk.GFLOPS
	if a.bytes > 0 {
		row.Attainable = min(pk.GFLOPS, row.Intensity*pk.GBps)
	}
	best := max(float64(a.flops)/(pk.GFLOPS*1e9), float64(a.bytes)/(pk.GBps*1e9)) // seconds at the roofline
	row.PctRoof = best / a.total.Seconds()
}

func sortRows(rows []Row, by SortBy) {
	byName := func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Kernel, b.Kernel), cmp.Compare(a.Variant, b.Variant),
			cmp.Compare(a.Shape, b.Shape), cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Phase, b.Phase),
			cmp.Compare(a.Device, b.Device))
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		var c int
		switch by {
		case SortCalls:
			c = cmp.Compare(b.Calls, a.Calls)
		case SortMean:
			c = cmp.Compare(b.Mean, a.Mean)
		case SortName:
			return byName(a, b)
		default:
			c = cmp.Compare(b.Total, a.Total)
		}
		return cmp.Or(c, byName(a, b))
	})
}

// phases splits the wall time among the phases: walking the kernels and
// host spans in order of start, each gap before an event is host time of
// the event's phase, and the time after the last event belongs to the last
// phase. Intervals that overlap an earlier event count once, for the
// earlier one.
func (p *Profile) phases() []PhaseRow {
	type event struct {
		start    time.Time
		d        time.Duration
		phase    string
		isKernel bool
	}
	evs := make([]event, 0, len(p.Records)+len(p.Spans))
	for _, r := range p.Records {
		evs = append(evs, event{r.Start, r.Duration, r.Phase.String(), true})
	}
	for _, s := range p.Spans {
		evs = append(evs, event{s.Start, s.Duration, s.Name, false})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return a.start.Compare(b.start) })
	type acc struct {
		calls        int
		kernel, wall time.Duration
	}
	m := map[string]*acc{}
	var order []string
	get := func(ph string) *acc {
		a := m[ph]
		if a == nil {
			a = &acc{}
			m[ph] = a
			order = append(order, ph)
		}
		return a
	}
	cursor, end := p.Start, p.Start.Add(p.Wall)
	last := "other"
	for _, e := range evs {
		a := get(e.phase)
		if e.start.After(cursor) {
			a.wall += e.start.Sub(cursor)
			cursor = e.start
		}
		if e.isKernel {
			a.calls++
			a.kernel += e.d
		}
		if eEnd := e.start.Add(e.d); eEnd.After(cursor) {
			a.wall += eEnd.Sub(cursor)
			cursor = eEnd
		}
		last = e.phase
	}
	if end.After(cursor) {
		get(last).wall += end.Sub(cursor)
	}
	it := time.Duration(max(p.Iterations, 1))
	rows := make([]PhaseRow, 0, len(order))
	for _, ph := range order {
		a := m[ph]
		r := PhaseRow{Phase: ph, Calls: float64(a.calls) / float64(it), Kernel: a.kernel / it, Wall: a.wall / it}
		// Outside is what the phase's wall holds beyond its kernels, so
		// that Kernel + Outside = Wall row by row.
		r.Outside = r.Wall - r.Kernel
		if p.Wall > 0 {
			r.Share = float64(a.wall) / float64(p.Wall)
		}
		rows = append(rows, r)
	}
	return rows
}

// formatShapes writes operand shapes as "(16,128,384) (384,128)".
func formatShapes(shapes [][]int) string {
	var b strings.Builder
	for i, s := range shapes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('(')
		for j, d := range s {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// String renders the report as an aligned text table.
func (r *Report) String() string {
	var b strings.Builder
	per := ""
	if r.Iterations > 1 {
		per = fmt.Sprintf(" per iteration (mean of %d)", r.Iterations)
	}
	fmt.Fprintf(&b, "profile%s: wall %s, in kernels %s (%s), outside kernels %s (%s), %s kernel calls\n",
		per, fmtDur(r.Wall), fmtDur(r.Kernel), pct(r.KernelShare), fmtDur(r.Outside), pct(1-r.KernelShare), fmtCalls(r.Calls))
	for _, d := range r.DeviceInfo {
		fmt.Fprintf(&b, "device: %s\n", d)
	}
	if pk := r.Peak; pk != nil {
		fmt.Fprintf(&b, "roofline: %s\n", pk.Summary())
		if pk.Describe != "" && !slices.Contains(r.DeviceInfo, pk.Describe) {
			fmt.Fprintf(&b, "  (peak measured with %s)\n", pk.Describe)
		}
	}
	if len(r.Phases) > 0 {
		b.WriteByte('\n')
		t := [][]string{{"phase", "calls", "kernels", "outside", "wall", "share"}}
		for _, ph := range r.Phases {
			t = append(t, []string{ph.Phase, fmtCalls(ph.Calls), fmtDur(ph.Kernel), fmtDur(ph.Outside), fmtDur(ph.Wall), pct(ph.Share)})
		}
		table(&b, t, "LRRRRR")
	}
	if len(r.Rows) == 0 {
		return b.String()
	}
	b.WriteByte('\n')
	head := []string{"kernel"}
	align := "L"
	switch r.Group {
	case GroupScope:
		head[0] = "scope"
	case GroupShape:
		head = append(head, "shape")
		align += "L"
	}
	if r.ByPhase {
		head = append(head, "phase")
		align += "L"
	}
	roof := r.Peak != nil
	head = append(head, "calls", "total", "mean", "min", "share", "GFLOP/s", "GB/s")
	align += "RRRRRRR"
	if r.Group == GroupScope {
		head = append(head, "scope wall")
		align += "R"
	}
	if roof {
		head = append(head, "FLOP/B", "bound", "% roof")
		align += "RLR"
	}
	t := [][]string{head}
	for _, row := range r.Rows {
		c := []string{row.Label()}
		if r.Group == GroupShape {
			c = append(c, clip(row.Shape, 44))
		}
		if r.ByPhase {
			c = append(c, row.Phase)
		}
		c = append(c, fmtCalls(row.Calls), fmtDur(row.Total), fmtDur(row.Mean), fmtDur(row.Min), pct(row.Share),
			rate(row.GFLOPS, row.FLOPs), rate(row.GBps, row.Bytes))
		if r.Group == GroupScope {
			w := ""
			if row.Wall > 0 {
				w = fmtDur(row.Wall)
			}
			c = append(c, w)
		}
		if roof {
			ai := ""
			if row.Bytes > 0 {
				ai = fmt.Sprintf("%.2f", row.Intensity)
			}
			pr := ""
			if row.Bound != "" {
				pr = pct(row.PctRoof)
			}
			c = append(c, ai, row.Bound, pr)
		}
		t = append(t, c)
	}
	table(&b, t, align)
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "… and %d more rows: %s (%s of kernel time)\n", r.Omitted, fmtDur(r.OmittedTotal), pct(r.OmittedShare))
	}
	return b.String()
}

// table writes t as columns: align[i] is 'L' or 'R' for column i; the
// first row is the header, underlined.
func table(b *strings.Builder, t [][]string, align string) {
	width := make([]int, len(align))
	for _, r := range t {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var s strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if align[i] == 'R' {
				s.WriteString(pad + c)
			} else {
				s.WriteString(c + pad)
			}
			s.WriteString("  ")
		}
		b.WriteString(strings.TrimRight(s.String(), " "))
		b.WriteByte('\n')
	}
	line(t[0])
	total := 0
	for _, w := range width {
		total += w + 2
	}
	b.WriteString(strings.Repeat("─", total-2))
	b.WriteByte('\n')
	for _, r := range t[1:] {
		line(r)
	}
}

func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func pct(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "—"
	}
	return fmt.Sprintf("%.1f %%", 100*f)
}

// rate formats a GFLOP/s or GB/s figure; blank when the kernel declares
// no such work.
func rate(v, work float64) string {
	if work == 0 {
		return ""
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtCalls(c float64) string {
	if c == math.Trunc(c) {
		return strconv.FormatFloat(c, 'f', 0, 64)
	}
	return strconv.FormatFloat(c, 'f', 1, 64)
}

// fmtDur prints a duration with three or four significant digits in the
// unit that suits it: "812 ns", "45.6 µs", "12.34 ms", "1.234 s".
func fmtDur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	// Thresholds sit just below each unit so that a value rounding up to
	// 1000 of one unit prints as 1.000 of the next.
	var v float64
	var unit string
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%s%d ns", neg, int64(d))
	case d < 999950*time.Nanosecond:
		v, unit = float64(d)/1e3, "µs"
	case d < 999950*time.Microsecond:
		v, unit = float64(d)/1e6, "ms"
	default:
		v, unit = float64(d)/1e9, "s"
	}
	switch {
	case v >= 99.995:
		return fmt.Sprintf("%s%.1f %s", neg, v, unit)
	case v >= 9.9995:
		return fmt.Sprintf("%s%.2f %s", neg, v, unit)
	}
	return fmt.Sprintf("%s%.3f %s", neg, v, unit)
}
