package metal

// Compiling ahead and the cross-process pipeline cache.
//
// Before its first pipeline, a backend asks a driver that can
// (driver.LibraryPrecompiler) to compile all its kernel libraries at once,
// reporting progress through backend.ReportCompile once that takes longer
// than backend.CompileProgressAfter. It then opens the driver's pipeline
// archive (driver.PipelineArchive) from the user's cache directory, so
// that a new process — a new notebook cell — finds the pipelines an
// earlier one compiled.
//
// The archive's file is named by a hash of the kernel sources and the
// driver's identity (GPU, OS version and build, compile options): changed
// kernels, another GPU or an OS update look for another file, and never
// reuse code compiled for something else. An archive that does not load
// is said in one line, removed and rebuilt. The archive is saved, when it
// gained pipelines, whenever the backend waits for all its work (Sync,
// and a host read of the loss at the end of each training step), by
// writing a temporary file beside it and renaming
// it over the old one, so that processes saving at once replace the file
// whole and a reader never sees half of one. Archives of other keys that
// no process has used for 30 days are removed.
//
// FORGE_METAL_CACHE sets the directory (default: os.UserCacheDir()/forge/metal);
// "off" keeps no archive.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/forgeml/forge/forge/backend"
	"github.com/forgeml/forge/metal/driver"
)

// archiveFormat is part of the archive key: raise it when what the
// archive holds, or how pipelines are built, changes.
const archiveFormat = "forge-metal-pipelines-1"

// defaultCacheDir is where the archive lives ("" for none).
func defaultCacheDir() string {
	switch v := os.Getenv("FORGE_METAL_CACHE"); v {
	case "off":
		return ""
	case "":
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(d, "forge", "metal")
	default:
		return v
	}
}

// archiveKey is the hex hash naming the archive of sources compiled under
// identity.
func archiveKey(sources map[string]string, identity string) string {
	files := make([]string, 0, len(sources))
	for f := range sources {
		files = append(files, f)
	}
	sort.Strings(files)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", archiveFormat, identity)
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00%s", f, len(sources[f]), sources[f])
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// archivePath is the archive file for key under dir.
func archivePath(dir, key string) string {
	return filepath.Join(dir, "pipelines-"+key+".metalarchive")
}

// compileState is the backend's part in compiling ahead and caching
// (guarded by Backend.mu).
type compileState struct {
	prepared bool
	sources  map[string]string // the kernel sources the archive key hashes
	dir      string            // cache directory ("" for none)
	log      io.Writer         // where a failing archive is said
	now      func() time.Time  // the clock of progress reports

	arch       driver.PipelineArchive // nil: no archive
	path       string
	savedAdded int // ArchiveCounts' added at the last save
}

func (c *compileState) init(sources map[string]string) {
	c.sources = sources
	c.dir = defaultCacheDir()
	c.log = os.Stderr
	c.now = time.Now
}

// prepareLocked runs once, before the backend's first pipeline: it
// compiles the libraries ahead where the driver can, and opens the
// archive.
func (b *Backend) prepareLocked() {
	c := &b.compile
	if c.prepared {
		return
	}
	c.prepared = true
	if lc, ok := b.drv.(driver.LibraryPrecompiler); ok {
		r := progressReporter{device: b.drv.Name(), now: c.now, report: backend.ReportCompile, tick: time.Second}
		r.start()
		lc.CompileLibraries(r.progress)
		r.finish()
	}
	if pa, ok := b.drv.(driver.PipelineArchive); ok && c.dir != "" && c.sources != nil {
		b.openArchiveLocked(pa)
	}
}

func (b *Backend) openArchiveLocked(pa driver.PipelineArchive) {
	c := &b.compile
	path := archivePath(c.dir, archiveKey(c.sources, pa.ArchiveIdentity()))
	load := path
	if _, err := os.Stat(path); err != nil {
		load = "" // none yet (or unreadable: the save below says so)
	}
	if err := pa.OpenArchive(load); err != nil {
		fmt.Fprintf(c.log, "metal: pipeline cache %s does not load (%v); compiling afresh and replacing it\n", path, err)
		os.Remove(path)
		if err := pa.OpenArchive(""); err != nil {
			fmt.Fprintf(c.log, "metal: no pipeline cache (%v)\n", err)
			return
		}
	}
	c.arch, c.path = pa, path
	_, c.savedAdded = pa.ArchiveCounts()
	if load != "" {
		t := c.now()
		os.Chtimes(path, t, t) // in use: pruning goes by last use
	}
	pruneArchives(c.dir, path, c.now())
}

// archiveMaxAge is how long an archive no process has used is kept: an
// archive of older kernels, an earlier OS or another GPU is not used
// again, and pruning keeps the directory from growing with each.
const archiveMaxAge = 30 * 24 * time.Hour

// pruneArchives removes the archives in dir other than keep that were
// last used (loaded or written) before now − archiveMaxAge.
func pruneArchives(dir, keep string, now time.Time) {
	old, _ := filepath.Glob(filepath.Join(dir, "pipelines-*.metalarchive"))
	for _, f := range old {
		if st, err := os.Stat(f); err == nil && f != keep && now.Sub(st.ModTime()) > archiveMaxAge {
			os.Remove(f)
		}
	}
}

// saveArchiveLocked writes the archive if it gained pipelines since it was
// last saved. A failure is said once and turns the archive off.
func (b *Backend) saveArchiveLocked() {
	c := &b.compile
	if c.arch == nil {
		return
	}
	_, added := c.arch.ArchiveCounts()
	if added == c.savedAdded {
		return
	}
	err := os.MkdirAll(c.dir, 0o755)
	var tmp string
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(c.dir, ".pipelines-*.tmp"); err == nil {
			tmp = f.Name()
			f.Close()
			os.Remove(tmp) // the name is ours; the driver creates the file
			if err = c.arch.SaveArchive(tmp); err == nil {
				err = os.Rename(tmp, c.path)
			}
		}
	}
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		fmt.Fprintf(c.log, "metal: cannot save the pipeline cache in %s (%v); pipelines compile again in each process\n", c.dir, err)
		c.arch = nil
		return
	}
	c.savedAdded = added
}

// ArchiveStats reports the pipeline cache: its file ("" when there is
// none), and how many pipelines came from it and were compiled and added
// in this process.
func (b *Backend) ArchiveStats() (path string, hits, added int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.compile.arch == nil {
		return "", 0, 0
	}
	hits, added = b.compile.arch.ArchiveCounts()
	return b.compile.path, hits, added
}

// progressReporter turns a driver's per-library progress into
// CompileProgress reports: none until compiling has run
// backend.CompileProgressAfter, then one per library and one a second
// while a library takes longer (a ticker: a slow library does not leave
// the front end silent), and a last one with Finished set.
type progressReporter struct {
	device string
	now    func() time.Time
	report func(backend.CompileProgress)
	tick   time.Duration // the ticker's period (0: none)

	mu          sync.Mutex // the ticker reports too
	t0          time.Time
	done, total int
	said        bool
	stop        chan struct{}
	stopped     sync.WaitGroup
}

func (r *progressReporter) start() {
	r.t0 = r.now()
	if r.tick <= 0 {
		return
	}
	r.stop = make(chan struct{})
	r.stopped.Add(1)
	go func() {
		defer r.stopped.Done()
		t := time.NewTicker(r.tick)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				r.mu.Lock()
				r.sayLocked(false)
				r.mu.Unlock()
			}
		}
	}()
}

func (r *progressReporter) progress(done, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.total = done, total
	r.sayLocked(false)
}

func (r *progressReporter) finish() {
	if r.stop != nil {
		close(r.stop)
		r.stopped.Wait()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sayLocked(true)
}

// sayLocked reports the state if compiling has run long enough (a last
// report only if an earlier one was made or it has).
func (r *progressReporter) sayLocked(finished bool) {
	el := r.now().Sub(r.t0)
	if el < backend.CompileProgressAfter && !(finished && r.said) {
		return
	}
	r.said = true
	r.report(backend.CompileProgress{Device: r.device, Done: r.done, Total: r.total, Elapsed: el, Finished: finished})
}
