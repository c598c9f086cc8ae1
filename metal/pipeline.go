package metal

// The pipeline cache: one compiled pipeline per kernel specialisation,
// keyed by driver.PipelineKey.String() ("kernel" or
// "kernel[0:bool=1,2:uint=64]"). A failed compilation is cached too, so a
// broken kernel costs one compile and fails the same way every time.
//
// Formatting the key costs more than the rest of an encode, so lookups go
// first through an index keyed by the key's fields (kernels with at most
// fastConsts constants: pkey refuses more, so every op's key is indexed);
// the text is built only on a miss.

import (
	"fmt"

	"github.com/forgeml/forge/metal/driver"
)

type pipeEntry struct {
	p   driver.Pipeline
	err error
}

// fastConsts is the most function constants a key of the fast index has.
// The largest sets the ops build have 6 (matmul, 16-bit layer_norm); a
// kernel that needs more than fastConsts makes pkey panic: raise it then.
const fastConsts = 8

// fastKey is a comparable copy of a PipelineKey with few constants.
type fastKey struct {
	kernel string
	n      int
	c      [fastConsts]driver.Constant
}

func toFastKey(key driver.PipelineKey) (fastKey, bool) {
	if len(key.Constants) > fastConsts {
		return fastKey{}, false
	}
	k := fastKey{kernel: key.Kernel, n: len(key.Constants)}
	copy(k.c[:], key.Constants)
	return k, true
}

// pipelineFor returns the compiled pipeline for key, compiling it on first
// use. It panics if the kernel does not compile, with the driver's message
// (file and line) and the kernel's name. Ops use it to size threadgroups
// from MaxThreads and SIMDWidth.
func (b *Backend) pipelineFor(key driver.PipelineKey) driver.Pipeline {
	fk, fast := toFastKey(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if fast {
		if e, ok := b.fastPipes[fk]; ok {
			return e.pipeline(key)
		}
	}
	s := key.String()
	e, ok := b.pipes[s]
	if !ok {
		b.prepareLocked()
		p, err := b.drv.Pipeline(key)
		if err == nil && p == nil {
			err = fmt.Errorf("driver returned no pipeline")
		}
		e = pipeEntry{p, err}
		b.pipes[s] = e
	}
	if fast {
		b.fastPipes[fk] = e
	}
	return e.pipeline(key)
}

func (e pipeEntry) pipeline(key driver.PipelineKey) driver.Pipeline {
	if e.err != nil {
		panic(fmt.Sprintf("metal: kernel %s: %v", key, e.err))
	}
	return e.p
}

// Pipelines returns how many pipelines the cache holds (compiled or failed).
func (b *Backend) Pipelines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pipes)
}
