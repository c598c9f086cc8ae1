package metal

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

var cacheSources = map[string]string{
	"a.metal": "kernel void copy_bytes(device uchar *d [[buffer(0)]]) {}",
	"b.metal": "kernel void fill_u32(device uint *d [[buffer(0)]]) {}",
}

var cacheKeys = []driver.PipelineKey{
	{Kernel: "copy_bytes"},
	{Kernel: "fill_u32"},
	{Kernel: "fill_u32", Constants: []driver.Constant{{Index: 0, Type: driver.Bool, Bits: 1}}},
}

// cacheProcess is one "process": a new backend over a new driver, its
// pipeline cache in dir, asked for every key of cacheKeys, then synced
// (which saves the cache).
func cacheProcess(t *testing.T, dir string, sources map[string]string, identity string) (*archFake, *Backend, string) {
	t.Helper()
	d := newArchFake(identity)
	b := New(d)
	b.compile.sources, b.compile.dir = sources, dir
	var log bytes.Buffer
	b.compile.log = &log
	for _, k := range cacheKeys {
		b.pipelineFor(k)
	}
	b.Sync()
	return d, b, log.String()
}

func TestPipelineCacheSecondProcessCompilesNothing(t *testing.T) {
	dir := t.TempDir()
	d1, b1, log := cacheProcess(t, dir, cacheSources, "Apple M3 Max, macOS 15.1 (24B83)")
	if got := d1.compiled(); got != len(cacheKeys) || log != "" {
		t.Fatalf("first process: %d compiles (want %d), log %q", got, len(cacheKeys), log)
	}
	path, hits, added := b1.ArchiveStats()
	if hits != 0 || added != len(cacheKeys) || len(d1.saved) != 1 {
		t.Fatalf("first process: %d hits, %d added, saves %v", hits, added, d1.saved)
	}
	if _, err := os.Stat(path); err != nil || filepath.Dir(path) != dir {
		t.Fatalf("archive %s: %v", path, err)
	}
	d2, b2, log := cacheProcess(t, dir, cacheSources, "Apple M3 Max, macOS 15.1 (24B83)")
	if got := d2.compiled(); got != 0 || log != "" {
		t.Fatalf("second process: %d compiles (want 0), log %q", got, log)
	}
	if p2, hits, added := b2.ArchiveStats(); p2 != path || hits != len(cacheKeys) || added != 0 {
		t.Fatalf("second process: %s %d hits %d added", p2, hits, added)
	}
	if len(d2.opened) != 1 || d2.opened[0] != path || len(d2.saved) != 0 {
		t.Fatalf("second process opened %v, saved %v: want it to load %s and save nothing", d2.opened, d2.saved, path)
	}
	// Nothing is left beside the archive (the temporary file was renamed).
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("cache dir holds %d files, want the archive only", len(ents))
	}
}

func TestPipelineCacheMisses(t *testing.T) {
	id := "Apple M3 Max, macOS 15.1 (24B83)"
	changed := map[string]string{"a.metal": cacheSources["a.metal"] + "\n// fixed", "b.metal": cacheSources["b.metal"]}
	for _, c := range []struct {
		name     string
		sources  map[string]string
		identity string
	}{
		{"changed source", changed, id},
		{"other OS", cacheSources, "Apple M3 Max, macOS 15.2 (24C101)"},
		{"other GPU", cacheSources, "Apple M4, macOS 15.1 (24B83)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			_, b1, _ := cacheProcess(t, dir, cacheSources, id)
			p1, _, _ := b1.ArchiveStats()
			d2, b2, log := cacheProcess(t, dir, c.sources, c.identity)
			p2, hits, _ := b2.ArchiveStats()
			if got := d2.compiled(); got != len(cacheKeys) || hits != 0 || log != "" {
				t.Fatalf("%d compiles (want %d), %d hits, log %q", got, len(cacheKeys), hits, log)
			}
			if p1 == p2 {
				t.Fatalf("both use %s", p1)
			}
		})
	}
}

func TestPipelineCacheCorruptFile(t *testing.T) {
	dir := t.TempDir()
	id := "Apple M2, macOS 14.6 (23G80)"
	_, b1, _ := cacheProcess(t, dir, cacheSources, id)
	path, _, _ := b1.ArchiveStats()
	if err := os.WriteFile(path, []byte("\x00\x01 half a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	d2, _, log := cacheProcess(t, dir, cacheSources, id)
	if got := d2.compiled(); got != len(cacheKeys) {
		t.Fatalf("after a corrupt archive: %d compiles, want %d", got, len(cacheKeys))
	}
	if n := strings.Count(log, "\n"); n != 1 || !strings.Contains(log, path) || !strings.Contains(log, "does not load") {
		t.Fatalf("want one line naming %s, got %q", path, log)
	}
	// It was replaced: the next process compiles nothing.
	d3, _, log := cacheProcess(t, dir, cacheSources, id)
	if got := d3.compiled(); got != 0 || log != "" {
		t.Fatalf("after the rebuild: %d compiles, log %q", got, log)
	}
}

// A corrupt archive is said once, even when the process that found it
// stops before saving another.
func TestPipelineCacheCorruptFileSaidOnce(t *testing.T) {
	dir := t.TempDir()
	id := "Apple M2, macOS 14.6 (23G80)"
	_, b1, _ := cacheProcess(t, dir, cacheSources, id)
	path, _, _ := b1.ArchiveStats()
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		d := newArchFake(id)
		b := New(d)
		var log bytes.Buffer
		b.compile.sources, b.compile.dir, b.compile.log = cacheSources, dir, &log
		b.pipelineFor(cacheKeys[0]) // no Sync: nothing saved
		if n := strings.Count(log.String(), "\n"); n != want {
			t.Fatalf("process %d: %d lines %q, want %d", i+2, n, log.String(), want)
		}
	}
}

func TestPipelineCacheOff(t *testing.T) {
	t.Setenv("FORGE_METAL_CACHE", "off")
	d := newArchFake("x")
	b := New(d)
	b.compile.sources = cacheSources
	b.pipelineFor(cacheKeys[0])
	b.Sync()
	if len(d.opened) != 0 || len(d.saved) != 0 {
		t.Fatalf("FORGE_METAL_CACHE=off: opened %v, saved %v", d.opened, d.saved)
	}
	t.Setenv("FORGE_METAL_CACHE", "/some/dir")
	if got := defaultCacheDir(); got != "/some/dir" {
		t.Fatalf("FORGE_METAL_CACHE=/some/dir: dir %q", got)
	}
}

// The libraries are compiled once, before the first pipeline, and the
// front end hears about it only when it takes over a second.
func TestCompileAheadProgress(t *testing.T) {
	for _, c := range []struct {
		perLib time.Duration
		want   []string
	}{
		{50 * time.Millisecond, nil}, // 13 × 50 ms: quiet
		{150 * time.Millisecond, []string{ // 1.05 s at the 7th
			"compiling fake kernels: 7/13 libraries, 1.1 s",
			"compiling fake kernels: 8/13 libraries, 1.2 s",
			"compiling fake kernels: 9/13 libraries, 1.4 s",
			"compiling fake kernels: 10/13 libraries, 1.5 s",
			"compiling fake kernels: 11/13 libraries, 1.6 s",
			"compiling fake kernels: 12/13 libraries, 1.8 s",
			"compiling fake kernels: 13/13 libraries, 1.9 s",
			"compiled fake kernels: 13 libraries in 1.9 s",
		}},
	} {
		d := newArchFake("x")
		d.name = "fake"
		b := New(d)
		b.compile.dir = "" // no archive
		clock := time.Unix(0, 0)
		b.compile.now = func() time.Time { return clock }
		d.libTime, d.tick = c.perLib, func(dt time.Duration) { clock = clock.Add(dt) }
		var got []string
		prev := backend.SetCompileObserver(func(p backend.CompileProgress) { got = append(got, p.String()) })
		b.pipelineFor(cacheKeys[0])
		b.pipelineFor(cacheKeys[1])
		backend.SetCompileObserver(prev)
		if d.libCompiles != 13 {
			t.Fatalf("%v a library: CompileLibraries compiled %d libraries, want 13 once", c.perLib, d.libCompiles)
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%v a library: reports\n%s\nwant\n%s", c.perLib, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
	}
}

// Two processes that save the same archive leave one whole file (the last
// save's); a third process loads it without a word and compiles only what
// that save lacked.
func TestPipelineCacheConcurrentSaves(t *testing.T) {
	dir := t.TempDir()
	id := "Apple M1, macOS 14.0 (23A344)"
	open := func() (*archFake, *Backend) {
		d := newArchFake(id)
		b := New(d)
		b.compile.sources, b.compile.dir = cacheSources, dir
		return d, b
	}
	_, a := open()
	_, b := open()
	a.pipelineFor(cacheKeys[0]) // both open the (absent) archive first
	b.pipelineFor(cacheKeys[1])
	a.pipelineFor(cacheKeys[2])
	a.Sync() // a saves keys 0 and 2
	b.Sync() // b replaces it with key 1
	var log bytes.Buffer
	d3, c := open()
	c.compile.log = &log
	for _, k := range cacheKeys {
		c.pipelineFor(k)
	}
	if _, hits, added := c.ArchiveStats(); log.Len() != 0 || hits != 1 || added != 2 || d3.compiled() != 2 {
		t.Fatalf("third process: %d hits, %d added, %d compiles, log %q; want 1, 2, 2 and no log", hits, added, d3.compiled(), log.String())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("cache dir holds %d files, want the archive only", len(ents))
	}
}

// A library that takes long is not silent: the ticker reports while no
// library completes.
func TestCompileProgressTicks(t *testing.T) {
	clock := time.Unix(0, 0)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	first := make(chan backend.CompileProgress, 1)
	var reports []backend.CompileProgress
	r := progressReporter{device: "fake", now: now, tick: time.Millisecond, report: func(p backend.CompileProgress) {
		reports = append(reports, p)
		select {
		case first <- p:
		default:
		}
	}}
	r.start()
	r.progress(0, 3)
	mu.Lock()
	clock = clock.Add(1500 * time.Millisecond) // the first library is slow
	mu.Unlock()
	select {
	case p := <-first:
		if p.Done != 0 || p.Total != 3 || p.Finished || p.String() != "compiling fake kernels: 0/3 libraries, 1.5 s" {
			t.Fatalf("ticker report %+v (%s)", p, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report while a library compiled for 1.5 s")
	}
	r.progress(3, 3)
	r.finish()
	if last := reports[len(reports)-1]; !last.Finished || last.String() != "compiled fake kernels: 3 libraries in 1.5 s" {
		t.Fatalf("last report %s", last)
	}
}

// Archives of other keys are removed once nothing has saved them for
// archiveMaxAge; the current one and recent ones stay.
func TestPipelineCachePrunesOldArchives(t *testing.T) {
	dir := t.TempDir()
	id := "Apple M3, macOS 15.0 (24A335)"
	stale := filepath.Join(dir, "pipelines-0123456789abcdef01234567.metalarchive")
	recent := filepath.Join(dir, "pipelines-fedcba9876543210fedcba98.metalarchive")
	other := filepath.Join(dir, "notes.txt")
	for _, f := range []string{stale, recent, other} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-archiveMaxAge - time.Hour)
	for _, f := range []string{stale, other} {
		if err := os.Chtimes(f, long, long); err != nil {
			t.Fatal(err)
		}
	}
	_, b, _ := cacheProcess(t, dir, cacheSources, id)
	cur, _, _ := b.ArchiveStats()
	// An archive only read from still counts as used.
	if err := os.Chtimes(cur, long, long); err != nil {
		t.Fatal(err)
	}
	cacheProcess(t, dir, cacheSources, id)
	if st, err := os.Stat(cur); err != nil || time.Since(st.ModTime()) > time.Hour {
		t.Fatalf("the archive a process loaded was not marked used: %v", err)
	}
	for f, want := range map[string]bool{stale: false, recent: true, other: true, cur: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(f), err == nil, want)
		}
	}
}
