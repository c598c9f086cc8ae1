package forge

import (
	"fmt"
	"runtime"
)

// AliasBytes makes t's memory the little-endian bytes mem, used in place
// with no copy where t's device can (the CPU always can for aligned
// memory; Metal on Apple silicon for memory that starts on a page and
// whose capacity reaches the end of its last page), and makes t
// read-only. It is how a model maps its weights from a file: the file's
// page cache becomes the tensor (torch.Tensor.set_ over a mapped storage
// is the nearest PyTorch analogue).
//
// mem holds exactly t.Numel() elements of t's dtype (cap(mem) may reach
// further, to a page boundary). keep owns mem: t's device holds it until
// it has released the memory (t freed or collected, and no queued kernel
// reading it), so a cleanup attached to keep may unmap mem.
//
// t must own its memory, be contiguous and have no views yet: views taken
// before keep the old memory, which AliasBytes frees. A read-only tensor
// is read by every op; an op that would write it (CopyFrom, an in-place
// op, an optimizer step) panics naming it. Clone makes a writable copy.
//
// The error says why mem cannot be used in place (alignment, size, a
// device that copies); t is unchanged then, and the caller copies.
func (t *Tensor) AliasBytes(mem []byte, keep any) error {
	t.checkLive()
	if t.owner != nil || t.offset != 0 || !t.IsContiguous() {
		return fmt.Errorf("forge: alias_bytes: %s is a view; alias the tensor that owns the memory", t.describe())
	}
	if want := t.Numel() * t.dtype.Size(); len(mem) != want {
		return fmt.Errorf("forge: alias_bytes: %s holds %d bytes, the memory given has %d", t.describe(), want, len(mem))
	}
	buf, err := t.dev.b.AliasHost(t.dtype, mem, keep)
	if err != nil {
		return fmt.Errorf("forge: alias_bytes: %s on %s: %w", t.describe(), t.dev.name, err)
	}
	old := t.buf
	t.buf = buf
	t.readOnly = true
	t.dev.b.Free(old)
	runtime.KeepAlive(keep)
	return nil
}

// ReadOnly reports whether t's memory may not be written: t, or the
// tensor it views, maps host memory in place (AliasBytes).
func (t *Tensor) ReadOnly() bool { return t.storageOwner().readOnly }

// describe names t in messages: its name if it has one, and its shape.
func (t *Tensor) describe() string {
	if t.name != "" {
		return fmt.Sprintf("%s %v", t.name, t.shape)
	}
	return fmt.Sprintf("tensor %v", t.shape)
}

// checkWritable panics if a kernel op would write one of out, and one of
// them is read-only.
func checkWritable(op string, out operands) {
	for _, t := range out.t[:out.n] {
		o := t.storageOwner()
		if !o.readOnly {
			continue
		}
		what := t.describe()
		if o != t && t.name == "" {
			what = "a view of " + o.describe()
		}
		panic(errorf(op, "%s is read-only: its memory is a model file mapped in place; write to a copy (Clone), or load the model to train it (train.Open of the repository)", what))
	}
}
