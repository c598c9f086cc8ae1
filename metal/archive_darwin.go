//go:build darwin && arm64

package metal

// The Metal driver's pipeline archive (driver.PipelineArchive): an
// MTLBinaryArchive (macOS 11) that Pipeline looks each pipeline up in
// before compiling it, and adds the ones it compiles to. The backend
// decides where the file lives and when it is loaded and saved
// (compilecache.go). This file is checked by cross-compilation only: it
// has not run on Apple hardware.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego/objc"

	"github.com/forgeml/forge/metal/driver"
)

// mtlPipelineOptionFailOnBinaryArchiveMiss (MTLPipelineOption, 1 << 2 in
// MTLDevice.h): the pipeline comes from an archive or not at all, which is
// how a hit is told from a compile.
const mtlPipelineOptionFailOnBinaryArchiveMiss = 1 << 2

var archSel struct {
	once                                                  sync.Once
	setURL, newArchive, fileURL, arrayWithObject          objc.SEL
	setComputeFunction, setBinaryArchives, newPipeDesc    objc.SEL
	addComputeFunctions, serialize, processInfo, osVerStr objc.SEL
}

func loadArchiveSelectors() {
	archSel.once.Do(func() {
		r := objc.RegisterName
		archSel.setURL, archSel.newArchive = r("setUrl:"), r("newBinaryArchiveWithDescriptor:error:")
		archSel.fileURL, archSel.arrayWithObject = r("fileURLWithPath:"), r("arrayWithObject:")
		archSel.setComputeFunction, archSel.setBinaryArchives = r("setComputeFunction:"), r("setBinaryArchives:")
		archSel.newPipeDesc = r("newComputePipelineStateWithDescriptor:options:reflection:error:")
		archSel.addComputeFunctions = r("addComputePipelineFunctionsWithDescriptor:error:")
		archSel.serialize = r("serializeToURL:error:")
		archSel.processInfo, archSel.osVerStr = r("processInfo"), r("operatingSystemVersionString")
	})
}

// fileURL returns an autoreleased NSURL of path (inside withPool).
func fileURL(path string) objc.ID {
	p := nsString(path)
	defer msg(p, sel.release)
	return msgID(objc.ID(objc.GetClass("NSURL")), archSel.fileURL, uintptr(p))
}

// ArchiveIdentity is the GPU's name, the OS version and build (NSProcessInfo's
// operatingSystemVersionString, e.g. "Version 15.1 (Build 24B83)"), and the
// MSL version and math mode the kernels compile with.
func (d *metalDriver) ArchiveIdentity() string {
	loadArchiveSelectors()
	var os string
	withPool(func() {
		pi := msgID(objc.ID(objc.GetClass("NSProcessInfo")), archSel.processInfo)
		os = goString(msgID(pi, archSel.osVerStr))
	})
	return fmt.Sprintf("%s; macOS %s; MSL %s; math %s", d.name, os, mslVersionName, d.math.name)
}

// OpenArchive opens the archive file at path ("" for a new empty one),
// replacing the archive open before.
func (d *metalDriver) OpenArchive(path string) error {
	loadArchiveSelectors()
	d.closeArchive()
	var err error
	withPool(func() {
		desc := msgID(msgID(objc.ID(objc.GetClass("MTLBinaryArchiveDescriptor")), sel.alloc), sel.init)
		defer msg(desc, sel.release)
		if path != "" {
			msg(desc, archSel.setURL, uintptr(fileURL(path)))
		}
		errp := new(objc.ID)
		a := msgID(d.dev, archSel.newArchive, uintptr(desc), uintptr(unsafe.Pointer(errp)))
		runtime.KeepAlive(errp)
		if a == 0 {
			err = errors.New(nsError(*errp))
			return
		}
		d.archive = a
	})
	return err
}

// SaveArchive serializes the archive to path.
func (d *metalDriver) SaveArchive(path string) error {
	if d.archive == 0 {
		return errors.New("no archive open")
	}
	var err error
	withPool(func() {
		errp := new(objc.ID)
		ok := msgBool(d.archive, archSel.serialize, uintptr(fileURL(path)), uintptr(unsafe.Pointer(errp)))
		runtime.KeepAlive(errp)
		if !ok {
			err = errors.New(nsError(*errp))
		}
	})
	return err
}

func (d *metalDriver) ArchiveCounts() (hits, added int) { return d.archHits, d.archAdded }

func (d *metalDriver) closeArchive() {
	if d.archive != 0 {
		msg(d.archive, sel.release)
		d.archive = 0
	}
	d.archHits, d.archAdded = 0, 0
}

// archivedPipeline makes fn's pipeline through the open archive (inside
// withPool): from the archive if it holds it, else compiled and added to
// it. A pipeline that compiles but cannot be added still serves (it is
// compiled again in the next process).
func (d *metalDriver) archivedPipeline(fn objc.ID) (pso objc.ID, err error) {
	desc := msgID(msgID(objc.ID(objc.GetClass("MTLComputePipelineDescriptor")), sel.alloc), sel.init)
	defer msg(desc, sel.release)
	msg(desc, archSel.setComputeFunction, uintptr(fn))
	msg(desc, archSel.setBinaryArchives, uintptr(msgID(objc.ID(objc.GetClass("NSArray")), archSel.arrayWithObject, uintptr(d.archive))))
	errp := new(objc.ID)
	pso = msgID(d.dev, archSel.newPipeDesc, uintptr(desc), mtlPipelineOptionFailOnBinaryArchiveMiss, 0, uintptr(unsafe.Pointer(errp)))
	if pso != 0 {
		d.archHits++
		return pso, nil
	}
	*errp = 0
	pso = msgID(d.dev, archSel.newPipeDesc, uintptr(desc), 0, 0, uintptr(unsafe.Pointer(errp)))
	if pso == 0 {
		runtime.KeepAlive(errp)
		return 0, errors.New(nsError(*errp))
	}
	*errp = 0
	if msgBool(d.archive, archSel.addComputeFunctions, uintptr(desc), uintptr(unsafe.Pointer(errp))) {
		d.archAdded++
	}
	runtime.KeepAlive(errp)
	return pso, nil
}

var (
	_ driver.PipelineArchive    = (*metalDriver)(nil)
	_ driver.LibraryPrecompiler = (*metalDriver)(nil)
	_ driver.LibraryCompiler    = (*metalDriver)(nil)
)
