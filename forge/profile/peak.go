package profile

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/forgeml/forge/forge"
	"github.com/forgeml/forge/internal/atomicfile"
	"github.com/forgeml/forge/internal/fmapeak"
)

// Roofline is a device's measured peak: its compute roof, the best sgemm
// rate and the best copy bandwidth seen over a few runs, the last two
// through the same kernels a profile records. It places kernels on a
// roofline for this very machine.
//
// The compute roof (GFLOPS) is the hardware's: on the CPU, the float32 FMA
// throughput of a loop of independent FMA chains at the widest vectors the
// CPU and OS run (internal/fmapeak), on every worker at once. The sgemm
// figure stands beside it, as what the best kernel reaches of that roof.
// Where no FMA loop measures the device (a GPU), or where sgemm beats the
// loop (the portable Go loop, or a library that uses matrix units beyond
// the vector FMAs), the roof is the sgemm figure, and Roof says so.
// "% of peak" and "% roof" are always of GFLOPS.
type Roofline struct {
	Version int    `json:"version"`        // peakVersion when measured
	Host    string `json:"host"`           // the machine's host name
	Device  string `json:"device"`         // backend name, e.g. "cpu"
	CPU     string `json:"cpu"`            // CPU model
	Procs   int    `json:"procs"`          // GOMAXPROCS when measured
	Variant string `json:"matmul_variant"` // the matmul path, e.g. "openblas-Cooperlake"
	// SgemmPath is the path the sgemm calibration's product took, where
	// it is not Variant (the CPU runs a lone product split between its
	// workers on its own kernel: "go-avx512").
	SgemmPath string `json:"sgemm_path,omitempty"`
	// Describe is the device's own line when measured
	// (forge.Device.Describe): the BLAS library, its kernels and who chose
	// them.
	Describe string `json:"describe"`

	GFLOPS float64 `json:"gflops"` // the compute roof, GFLOP/s: FMA or Sgemm, as Roof says
	Roof   string  `json:"roof"`   // "fma" or "sgemm": which measurement GFLOPS is

	FMA       float64 `json:"fma_gflops"`        // best float32 FMA-loop GFLOP/s, all workers together (0: not measured)
	FMAMedian float64 `json:"fma_gflops_median"` // median of the runs
	FMAKernel string  `json:"fma_kernel"`        // the loop: "avx512-zmm", "avx2-ymm", "neon-q" or "go-scalar"
	FMAVector bool    `json:"fma_vector"`        // the loop ran the vector units (false: the portable Go loop)
	// FMAOther holds the narrower vector loops measured beside the widest
	// (avx2-ymm on an AVX-512 CPU), best of their runs.
	FMAOther []FMARate `json:"fma_other,omitempty"`

	Sgemm       float64 `json:"sgemm_gflops"`        // best sgemm GFLOP/s (2·N³ per call)
	SgemmMedian float64 `json:"sgemm_gflops_median"` // median of the runs
	GBps        float64 `json:"gbps"`                // best copy GB/s (bytes read + written)
	GBpsMedian  float64 `json:"gbps_median"`

	MatmulN   int       `json:"matmul_n"`   // N of the N×N×N sgemm
	CopyBytes int64     `json:"copy_bytes"` // size of the copied float32 tensor
	Runs      int       `json:"runs"`       // timed runs of each
	Measured  time.Time `json:"measured"`
	// Busy is the share of the CPUs' time other processes used while
	// measuring (-1: unknown, not Linux). A peak measured above
	// busyLimit is cached like any other (measuring again on a machine
	// that stays busy would cost seconds in every process and measure no
	// better), and Summary says it may be low: Calibrate measures again.
	Busy float64 `json:"busy"`
}

// FMARate is one FMA loop's best rate.
type FMARate struct {
	Kernel string  `json:"kernel"`
	GFLOPS float64 `json:"gflops"`
}

// peakVersion changes whenever a Roofline's fields change meaning; it is
// part of the cache key, so older cache files are measured again. Version
// 2: GFLOPS became the FMA-loop roof (it was the sgemm figure); 3: the
// host name is part of the key.
const peakVersion = 3

// watchLoad is otherLoad; tests replace it.
var watchLoad = otherLoad

// busyLimit is the most CPU time other processes may take during a
// calibration before its Summary warns that it may be low.
const busyLimit = 0.10

// Ridge is the arithmetic intensity (FLOP/byte) where the roofline bends:
// kernels below it are memory-bound, above it compute-bound.
func (p *Roofline) Ridge() float64 {
	if p.GBps <= 0 {
		return 0
	}
	return p.GFLOPS / p.GBps
}

// SgemmShare is the sgemm figure as a fraction of the compute roof.
func (p *Roofline) SgemmShare() float64 {
	if p.GFLOPS <= 0 {
		return 0
	}
	return p.Sgemm / p.GFLOPS
}

// Summary is the roofline in one line, without the device's description:
// "cpu (AMD EPYC, 2 procs): peak 233.4 GFLOP/s FMA (avx512-zmm on 2
// workers; avx2-ymm 231.0), sgemm 2048³ 190.5 GFLOP/s = 82 % of peak
// (matmul openblas-Cooperlake), copy 41.2 GB/s; ridge 5.7 FLOP/B".
func (p *Roofline) Summary() string {
	var roof string
	switch {
	case p.Roof == "fma":
		roof = fmt.Sprintf("peak %.1f GFLOP/s FMA (%s on %d workers", p.GFLOPS, p.FMAKernel, p.Procs)
		for _, o := range p.FMAOther {
			roof += fmt.Sprintf("; %s %.1f", o.Kernel, o.GFLOPS)
		}
		roof += ")"
	case p.FMA > 0:
		roof = fmt.Sprintf("peak %.1f GFLOP/s from sgemm (above the FMA loop's %.1f, %s", p.GFLOPS, p.FMA, p.FMAKernel)
		if !p.FMAVector {
			roof += ": portable Go, not the vector units"
		}
		roof += ")"
	default:
		roof = fmt.Sprintf("peak %.1f GFLOP/s from sgemm (no FMA loop for this device)", p.GFLOPS)
	}
	s := fmt.Sprintf("%s (%s, %d procs): %s, sgemm %d³ %.1f GFLOP/s = %.0f %% of peak (matmul %s), copy %.1f GB/s; ridge %.1f FLOP/B",
		p.Device, p.CPU, p.Procs, roof, p.MatmulN, p.Sgemm, 100*p.SgemmShare(), cmp.Or(p.SgemmPath, p.Variant), p.GBps, p.Ridge())
	if p.Busy > busyLimit {
		s += fmt.Sprintf(" (measured while other processes used %.0f %% of the CPUs: may be low; "+
			"profile.Calibrate() or `forge bench peak --recalibrate` measures again)", 100*p.Busy)
	}
	return s
}

// String is Summary and, on a second line, what the device ran with
// ("  device: cpu: 2 workers, matmul openblas-Cooperlake: OpenBLAS …").
func (p *Roofline) String() string {
	if p.Describe == "" {
		return p.Summary()
	}
	return p.Summary() + "\n  device: " + p.Describe
}

// key identifies the machine a peak belongs to (host, CPU model, worker
// count), and what the device ran with: its Describe line names the BLAS,
// its kernels (the OpenBLAS core) and which products run forge's own, so
// a change in any of them measures again. The load while measuring is
// kept with the peak (Busy) but is not part of the key.
func (p *Roofline) key() string {
	return peakKey(p.Version, p.Host, p.Device, p.CPU, p.Procs, p.Describe)
}

func peakKey(version int, host, device, cpu string, procs int, describe string) string {
	return fmt.Sprintf("v%d|%s|%s|%s|%d|%s", version, host, device, cpu, procs, describe)
}

// Calibration sizes: a 2048³ sgemm (17 GFLOP, ~0.1 s on two cores) and a
// 64 MiB copy, five timed runs each after one warm-up; each vector FMA loop
// seven runs of 40 ms (a run on a shared machine now and then loses a
// worker to another tenant: the best run is the peak).
// (Variables only so that tests can shrink them.)
var (
	calibN    = 2048
	calibCopy = 64 << 20 / 4 // float32 elements
	calibRuns = 5
)

const (
	fmaRuns    = 7
	peakSubdir = "profile"
)

// fmaRunTime is how long one FMA-loop run lasts; tests shorten it.
var fmaRunTime = 40 * time.Millisecond

var (
	peakMu    sync.Mutex
	peakCache = map[string]*Roofline{} // by key
)

// Peak returns the default device's peak: from this process's memory, the
// cache file, or (the first time on a machine, ~1.5 s idle, several
// seconds busy) by calibrating and caching the result with the conditions
// it was measured under. It measures only when no peak is cached for this
// machine (host, CPU, workers, BLAS kernels): a peak measured while the
// machine was busy is cached too and says so (Roofline.Busy), and only
// Calibrate measures again. It never fails; when the cache cannot be
// written, the next process measures again.
func Peak() *Roofline {
	d := forge.DefaultDevice()
	if p := KnownPeak(d.Name()); p != nil {
		return p
	}
	peakMu.Lock()
	defer peakMu.Unlock()
	if p := lookupPeak(d); p != nil { // calibrated meanwhile
		return p
	}
	p, _ := calibrateLocked(d, calibN, calibCopy, calibRuns)
	return p
}

// Calibrate measures the default device's peak now, replacing any cached
// one (`forge bench peak --recalibrate` calls it). The error reports a
// cache that could not be written; the peak is valid either way.
func Calibrate() (*Roofline, error) {
	peakMu.Lock()
	defer peakMu.Unlock()
	return calibrateLocked(forge.DefaultDevice(), calibN, calibCopy, calibRuns)
}

// KnownPeak returns the peak of the named device if this process or the
// cache already has it, and nil otherwise; it never measures.
func KnownPeak(device string) *Roofline {
	d, err := forge.OpenDevice(device)
	if err != nil {
		return nil
	}
	peakMu.Lock()
	defer peakMu.Unlock()
	return lookupPeak(d)
}

// lookupPeak finds d's peak in memory or on disk. peakMu is held.
func lookupPeak(d *forge.Device) *Roofline {
	key := deviceKey(d)
	if p := peakCache[key]; p != nil {
		return p
	}
	path, err := peakPath(key)
	if err != nil {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var p Roofline
	if json.Unmarshal(b, &p) != nil || p.key() != key || p.GFLOPS <= 0 || p.Sgemm <= 0 || p.GBps <= 0 {
		return nil
	}
	peakCache[key] = &p
	return &p
}

func deviceKey(d *forge.Device) string {
	return peakKey(peakVersion, hostName(), d.Name(), cpuModel(), runtime.GOMAXPROCS(0), d.Describe())
}

// hostName is the machine's host name ("" when the system does not say);
// tests replace it.
var hostName = func() string { h, _ := os.Hostname(); return h }

// peakPath is the cache file for key: $FORGE_CACHE_DIR (or the user's
// cache directory + "forge") / profile / peak-<hash of key>.json.
func peakPath(key string) (string, error) {
	root := os.Getenv("FORGE_CACHE_DIR")
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		root = filepath.Join(c, "forge")
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return filepath.Join(root, peakSubdir, fmt.Sprintf("peak-%016x.json", h.Sum64())), nil
}

// calibrateLocked measures d's peak with an n³ sgemm and a copy of
// copyElems float32 values, runs times each after a warm-up, and, on the
// CPU, the FMA loops; it caches the result in memory and on disk. peakMu
// is held.
func calibrateLocked(d *forge.Device, n, copyElems, runs int) (*Roofline, error) {
	runs = max(runs, 1)
	p := &Roofline{
		Version: peakVersion, Host: hostName(), Device: d.Name(), CPU: cpuModel(), Procs: runtime.GOMAXPROCS(0),
		Variant: d.Variant("matmul"), Describe: d.Describe(),
		MatmulN: n, CopyBytes: int64(copyElems) * 4, Runs: runs, Measured: time.Now().UTC().Truncate(time.Second),
	}
	// d is the default device: the tensors below live on it.
	g := forge.NewGenerator(0)
	load := watchLoad()
	var gf, gb []float64
	forge.NoGrad(func() {
		a, b := g.Randn(forge.Float32, n, n), g.Randn(forge.Float32, n, n)
		prof := Run(func() {
			for range runs + 1 {
				a.MatMul(b)
				d.Sync()
			}
		})
		gf = rates(prof, "matmul", func(r Record) float64 { return float64(r.FLOPs) })
		for _, r := range prof.Records {
			if r.Kernel == "matmul" && r.Variant != p.Variant {
				p.SgemmPath = r.Variant
			}
		}
		src, dst := g.Randn(forge.Float32, copyElems), forge.Zeros(copyElems)
		prof = Run(func() {
			for range runs + 1 {
				dst.CopyFrom(src)
				d.Sync()
			}
		})
		gb = rates(prof, "copy", func(r Record) float64 { return float64(r.Bytes) })
	})
	p.Sgemm, p.SgemmMedian = slices.Max(gf), median(gf)
	p.GBps, p.GBpsMedian = slices.Max(gb), median(gb)
	if d.Name() == "cpu" {
		measureFMA(p)
	}
	p.GFLOPS, p.Roof = p.Sgemm, "sgemm"
	if p.FMA >= p.Sgemm {
		p.GFLOPS, p.Roof = p.FMA, "fma"
	}
	p.Busy = load()
	key := p.key()
	peakCache[key] = p
	path, err := peakPath(key)
	if err != nil {
		return p, fmt.Errorf("profile: no cache directory for the peak (set FORGE_CACHE_DIR): %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return p, fmt.Errorf("profile: caching the peak: %w", err)
	}
	b, _ := json.MarshalIndent(p, "", "  ")
	if err := atomicfile.WriteBytes(path, append(b, '\n')); err != nil {
		return p, fmt.Errorf("profile: caching the peak in %s: %w", path, err)
	}
	return p, nil
}

// measureFMA fills p's FMA fields: every vector FMA loop the CPU runs
// (widest first; the portable Go loop only when there is none), fmaRuns
// runs of fmaRunTime each on all GOMAXPROCS workers at once, the loops
// taking turns so that a passing disturbance (another tenant taking a
// core for a moment) falls on all of them alike. The widest loop's best
// run is the FMA peak; the narrower ones go to FMAOther.
func measureFMA(p *Roofline) {
	var kernels []fmapeak.Kernel
	for i, k := range fmapeak.Kernels() {
		if k.Vector || i == 0 { // the portable loop only when there is no other
			kernels = append(kernels, k)
		}
	}
	runs := make([][]float64, len(kernels))
	for range fmaRuns {
		for i, k := range kernels {
			runs[i] = append(runs[i], fmapeak.Measure(k, p.Procs, fmaRunTime).GFLOPS)
		}
	}
	p.FMAKernel, p.FMAVector = kernels[0].Name, kernels[0].Vector
	p.FMA, p.FMAMedian = slices.Max(runs[0]), median(runs[0])
	p.FMAOther = nil
	for i, k := range kernels[1:] {
		p.FMAOther = append(p.FMAOther, FMARate{Kernel: k.Name, GFLOPS: slices.Max(runs[i+1])})
	}
}

// rates returns work(r)/duration in units of 1e9 per second for the
// records of kernel, skipping the first (the warm-up).
func rates(p *Profile, kernel string, work func(Record) float64) []float64 {
	var out []float64
	seen := 0
	for _, r := range p.Records {
		if r.Kernel != kernel {
			continue
		}
		seen++
		if seen == 1 || r.Duration <= 0 {
			continue
		}
		out = append(out, work(r)/r.Duration.Seconds()/1e9)
	}
	if len(out) == 0 {
		return []float64{0}
	}
	return out
}

// median of v (0 for none).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

var errNoModel = errors.New("no CPU model")

var cpuModelOnce = sync.OnceValue(func() string {
	if m, err := readCPUModel(); err == nil && m != "" {
		return m
	}
	return runtime.GOOS + "/" + runtime.GOARCH
})

// cpuModel names the processor ("AMD EPYC", "Apple M3 Pro"), or the
// platform when the system does not say.
func cpuModel() string { return cpuModelOnce() }
