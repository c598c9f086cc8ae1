package profile

import (
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
	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/internal/atomicfile"
)

// Roofline is a device's measured peak: the best sgemm rate and the best copy
// bandwidth seen over a few runs, through the same kernels a profile
// records. It places kernels on a roofline for this very machine.
type Roofline struct {
	Device  string `json:"device"`         // backend name, e.g. "cpu"
	CPU     string `json:"cpu"`            // CPU model
	Procs   int    `json:"procs"`          // GOMAXPROCS when measured
	Variant string `json:"matmul_variant"` // the matmul path, e.g. "openblas"

	GFLOPS       float64 `json:"gflops"`        // best sgemm GFLOP/s (2·N³ per call)
	GFLOPSMedian float64 `json:"gflops_median"` // median of the runs
	GBps         float64 `json:"gbps"`          // best copy GB/s (bytes read + written)
	GBpsMedian   float64 `json:"gbps_median"`

	MatmulN   int       `json:"matmul_n"`   // N of the N×N×N sgemm
	CopyBytes int64     `json:"copy_bytes"` // size of the copied float32 tensor
	Runs      int       `json:"runs"`       // timed runs of each
	Measured  time.Time `json:"measured"`
	// Busy is the share of the CPUs' time other processes used while
	// measuring (-1: unknown, not Linux). A peak measured above
	// busyLimit is kept for this process only, never cached.
	Busy float64 `json:"busy"`
}

// watchLoad is otherLoad; tests replace it.
var watchLoad = otherLoad

// busyLimit is the most CPU time other processes may take during a
// calibration whose result is cached.
const busyLimit = 0.10

// Ridge is the arithmetic intensity (FLOP/byte) where the roofline bends:
// kernels below it are memory-bound, above it compute-bound.
func (p *Roofline) Ridge() float64 {
	if p.GBps <= 0 {
		return 0
	}
	return p.GFLOPS / p.GBps
}

func (p *Roofline) String() string {
	s := fmt.Sprintf("%s (%s, %d procs, matmul %s): %.1f GFLOP/s sgemm %d³, %.1f GB/s copy; ridge %.1f FLOP/B",
		p.Device, p.CPU, p.Procs, p.Variant, p.GFLOPS, p.MatmulN, p.GBps, p.Ridge())
	if p.Busy > busyLimit {
		s += fmt.Sprintf(" (measured while other processes used %.0f %% of the CPUs: low, not cached)", 100*p.Busy)
	}
	return s
}

// key identifies the machine a peak belongs to.
func (p *Roofline) key() string { return peakKey(p.Device, p.CPU, p.Procs, p.Variant) }

func peakKey(device, cpu string, procs int, variant string) string {
	return fmt.Sprintf("%s|%s|%d|%s", device, cpu, procs, variant)
}

// Calibration sizes: a 2048³ sgemm (17 GFLOP, ~0.1 s on two cores) and a
// 64 MiB copy, five timed runs each after one warm-up.
const (
	calibN     = 2048
	calibCopy  = 64 << 20 / 4 // float32 elements
	calibRuns  = 5
	peakSubdir = "profile"
)

var (
	peakMu    sync.Mutex
	peakCache = map[string]*Roofline{} // by key
)

// Peak returns the default device's peak: from this process's memory, the
// cache file, or (the first time on a machine, ~1 s) by calibrating and
// caching the result. It never fails; when the cache cannot be written, or
// other processes were busy during the measurement (Roofline.Busy), the
// next process measures again.
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
// one. The error reports a cache that could not be written; the peak is
// valid either way.
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
	if json.Unmarshal(b, &p) != nil || p.key() != key || p.GFLOPS <= 0 || p.GBps <= 0 {
		return nil
	}
	peakCache[key] = &p
	return &p
}

func deviceKey(d *forge.Device) string {
	return peakKey(d.Name(), cpuModel(), runtime.GOMAXPROCS(0), variantOf(d.Backend(), "matmul"))
}

func variantOf(be backend.Backend, kernel string) string {
	if vn, ok := be.(backend.VariantNamer); ok {
		return vn.Variant(kernel)
	}
	return ""
}

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
// copyElems float32 values, runs times each after a warm-up, and caches
// it in memory and on disk. peakMu is held.
func calibrateLocked(d *forge.Device, n, copyElems, runs int) (*Roofline, error) {
	runs = max(runs, 1)
	p := &Roofline{
		Device: d.Name(), CPU: cpuModel(), Procs: runtime.GOMAXPROCS(0), Variant: variantOf(d.Backend(), "matmul"),
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
		src, dst := g.Randn(forge.Float32, copyElems), forge.Zeros(copyElems)
		prof = Run(func() {
			for range runs + 1 {
				dst.CopyFrom(src)
				d.Sync()
			}
		})
		gb = rates(prof, "copy", func(r Record) float64 { return float64(r.Bytes) })
	})
	p.GFLOPS, p.GFLOPSMedian = slices.Max(gf), median(gf)
	p.GBps, p.GBpsMedian = slices.Max(gb), median(gb)
	p.Busy = load()
	key := p.key()
	peakCache[key] = p
	if p.Busy > busyLimit {
		return p, fmt.Errorf("profile: other processes used %.0f %% of the CPUs while measuring the peak; "+
			"it is kept for this process but not cached (measure again on an idle machine)", 100*p.Busy)
	}
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
