package forge

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/forgeml/forge/forge/backend"
)

// DType is a tensor's element type.
type DType = backend.DType

// The dtypes.
const (
	Float32  = backend.Float32
	Float64  = backend.Float64
	Int32    = backend.Int32
	Float16  = backend.Float16  // IEEE 754 half; storage dtype (make one with Cast)
	BFloat16 = backend.BFloat16 // bfloat16; storage dtype (make one with Cast)
)

// Device is a backend that tensors live on.
type Device struct {
	name string
	b    backend.Backend
	caps backend.Capabilities // read once, when the device opens
}

// Name returns the backend's registry name ("cpu", "metal", …).
func (d *Device) Name() string { return d.name }

// Describe says in one line what the device runs its kernels with (for the
// CPU: the BLAS library, its kernels and who chose them, or the Go kernel),
// or just its name if the backend does not say more.
func (d *Device) Describe() string {
	if s := d.b.Describe(); s != "" {
		return d.name + ": " + s
	}
	return d.name
}

// Variant names the code path of kernel where the device has several (the
// CPU's matmul: "openblas-SkylakeX", "go-avx512", …): the path its last
// call took, or before any call the one a large call takes; "" where the
// device has one path.
func (d *Device) Variant(kernel string) string { return d.b.Variant(kernel) }

// Supports reports whether the device runs kernel (a backend.Kernel…
// name, such as backend.KernelMatMul) on dtype dt. Forge composes the
// optional kernels (backend.OptionalKernels) a device does not run from
// the ones it does.
func (d *Device) Supports(kernel string, dt DType) bool { return d.caps.Has(kernel, dt) }

// computeKernels are the kernels a model runs in its compute dtype.
// The others have compositions from these.
var computeKernels = []string{backend.KernelUnary, backend.KernelBinary, backend.KernelWhere,
	backend.KernelReduce, backend.KernelMatMul}

// CanCompute returns nil if the device runs the kernels a model's forward
// and backward need on dtype dt (products, elementwise ops, reductions;
// norms, attention and cross-entropy are composed from them where the
// device has no kernel of its own), else an error naming the first it
// does not.
func (d *Device) CanCompute(dt DType) error {
	for _, k := range computeKernels {
		if !d.caps.Has(k, dt) {
			return fmt.Errorf("the %s device cannot compute in %v (it has no %v %s kernel; it computes %s in %v)", d.name, dt, dt, k, k, d.caps[k])
		}
	}
	return nil
}

// Capabilities returns the device's kernel table: the kernels it runs and
// on which dtypes (a copy).
func (d *Device) Capabilities() backend.Capabilities { return d.caps.Without() }

// String returns the device name.
func (d *Device) String() string { return d.name }

// Sync waits until every queued kernel on the device has finished.
func (d *Device) Sync() { d.b.Sync() }

var (
	devMu         sync.Mutex
	devices       = map[string]*Device{}
	defaultDev    *Device
	defaultChoice DeviceChoice // why defaultDev, when set
	lastChoice    DeviceChoice // the last made by DefaultDeviceChoice or UseDevice
)

// OpenDevice returns the device of the named backend ("cpu", "metal", …).
// Its kernels run on the backend backend.Open(name) returns, which the
// registry opens once per registration: code below forge (a backend's
// tests, forgetest) reaches a device's backend that way, never through
// the device.
func OpenDevice(name string) (*Device, error) {
	devMu.Lock()
	defer devMu.Unlock()
	if d, ok := devices[name]; ok {
		return d, nil
	}
	b, err := backend.Open(name)
	if err != nil {
		return nil, fmt.Errorf("forge: %w", err)
	}
	d := &Device{name: name, b: b, caps: b.Capabilities()}
	devices[name] = d
	return d, nil
}

// DefaultDevice returns the device new tensors are created on: the one
// SetDefaultDevice or UseDevice set, else the default choice (see
// DeviceChoice; DefaultDeviceChoice says which and why): the backend
// FORGE_BACKEND names, else Metal on Apple silicon when it opens, else the
// CPU. It panics if FORGE_BACKEND names a device that cannot be opened.
func DefaultDevice() *Device {
	devMu.Lock()
	d := defaultDev
	devMu.Unlock()
	if d != nil {
		return d
	}
	if _, err := DefaultDeviceChoice(); err != nil {
		if fe, ok := err.(*Error); ok {
			panic(fe)
		}
		panic(&Error{Op: "device", Msg: err.Error()})
	}
	devMu.Lock()
	defer devMu.Unlock()
	return defaultDev
}

// SetDefaultDevice makes d the device new tensors are created on
// (DefaultDeviceChoice then gives the reason "set by the program"); nil
// returns to the default choice, made again on next use.
func SetDefaultDevice(d *Device) {
	devMu.Lock()
	defaultDev = d
	defaultChoice = DeviceChoice{}
	switch {
	case d != nil && d.name == lastChoice.Name:
		defaultChoice = lastChoice // put back, as the tests' helpers do
	case d != nil:
		defaultChoice = DeviceChoice{Name: d.name, Reason: "set by the program"}
	}
	devMu.Unlock()
}

// Tensor is an n-dimensional array on a device, optionally part of an
// autograd graph. Tensors are immutable from the outside except for their
// gradient and name: ops return new tensors, which may share memory with
// their input (views).
type Tensor struct {
	shape   []int
	strides []int // in elements
	offset  int
	dtype   DType
	dev     *Device
	buf     backend.Buffer

	name         string
	requiresGrad bool
	grad         *Tensor // accumulated gradient of a leaf
	node         *node   // the op that made this tensor; nil for leaves

	// pendingZero, set on a gradient accumulator being built by Backward
	// only, lists the spans of it not yet written (zeros to be).
	pendingZero *zeroSpans

	// owner is the tensor that allocated buf, for a view (nil for the
	// owner itself). On the owner: freedBy says what freed buf ("" while
	// it is live), arena is the innermost Collect or Backward tracking it
	// (memory.go), and pinned exempts it from them all.
	owner   *Tensor
	freedBy string
	arena   *arena
	pinned  bool
	// readOnly, on the owner: buf is host memory used in place
	// (AliasBytes); no kernel may write it.
	readOnly bool
}

// newTensor allocates a contiguous tensor on dev.
func newTensor(dev *Device, dt DType, shape []int) *Tensor {
	return newTensorOp("alloc", dev, dt, shape)
}

// newTensorOp is newTensor with op naming the allocation in errors.
func newTensorOp(op string, dev *Device, dt DType, shape []int) *Tensor {
	checkShape(op, shape)
	checkBudget(op, dev, dt, shape)
	shape = slices.Clone(shape)
	n := numel(shape)
	t := &Tensor{
		shape:   shape,
		strides: backend.ContiguousStrides(shape),
		dtype:   dt,
		dev:     dev,
		buf:     dev.b.Alloc(dt, n),
	}
	track(t)
	return t
}

// view returns a tensor sharing t's buffer with a new shape, strides and
// offset (no graph edge).
func (t *Tensor) view(shape, strides []int, offset int) *Tensor {
	return &Tensor{shape: shape, strides: strides, offset: offset, dtype: t.dtype, dev: t.dev, buf: t.buf, owner: t.storageOwner()}
}

// storageOwner is the tensor that allocated t's memory.
func (t *Tensor) storageOwner() *Tensor {
	if t.owner != nil {
		return t.owner
	}
	return t
}

// bv is the backend view of t.
func (t *Tensor) bv() backend.View {
	t.checkLive()
	return backend.View{Buf: t.buf, Offset: t.offset, Shape: t.shape, Strides: t.strides}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Shape returns a copy of the tensor's shape.
func (t *Tensor) Shape() []int { return slices.Clone(t.shape) }

// Dim returns the number of dimensions.
func (t *Tensor) Dim() int { return len(t.shape) }

// Size returns the length of axis (negative counts from the end).
func (t *Tensor) Size(axis int) int { return t.shape[t.axis("size", axis)] }

// Strides returns a copy of the tensor's strides, in elements.
func (t *Tensor) Strides() []int { return slices.Clone(t.strides) }

// Numel returns the number of elements.
func (t *Tensor) Numel() int { return numel(t.shape) }

// DType returns the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Device returns the device the tensor lives on.
func (t *Tensor) Device() *Device { return t.dev }

// Name returns the tensor's name ("" unless set, e.g. for parameters).
func (t *Tensor) Name() string { return t.name }

// SetName names the tensor and returns it.
func (t *Tensor) SetName(name string) *Tensor { t.name = name; return t }

// IsContiguous reports whether the tensor is row-major without gaps.
func (t *Tensor) IsContiguous() bool { return t.bv().IsContiguous() }

// IsLeaf reports whether the tensor was created by the user rather than by
// an op that recorded a graph.
func (t *Tensor) IsLeaf() bool { return t.node == nil }

// axis normalises a possibly negative axis, panicking if out of range.
func (t *Tensor) axis(op string, a int) int {
	n := len(t.shape)
	if a < -n || a >= n || (n == 0 && a != 0) {
		panic(errorf(op, "axis %d out of range for shape %v", a, t.shape))
	}
	if a < 0 {
		a += n
	}
	return a
}

// ---------------------------------------------------------------------------
// Errors

// Error is the panic value of misused ops; Try returns it as an error.
type Error struct {
	Op  string // the op, e.g. "matmul"
	Msg string // what went wrong, naming the shapes
	// Trip is set when the NaN tripwire caught the error (SetTripwire).
	Trip *Trip
}

func (e *Error) Error() string { return "forge: " + e.Op + ": " + e.Msg }

func errorf(op, format string, args ...any) *Error {
	return &Error{Op: op, Msg: fmt.Sprintf(format, args...)}
}

// Try runs fn and returns the *Error it panics with, if any. Any other
// panic is returned as an error that carries the panic value and stack, so
// a session survives bugs too.
func Try(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			switch e := r.(type) {
			case *Error:
				err = e
			case error:
				err = fmt.Errorf("forge: panic: %w\n%s", e, debug.Stack())
			default:
				err = fmt.Errorf("forge: panic: %v\n%s", r, debug.Stack())
			}
		}
	}()
	fn()
	return nil
}

// sameDevice panics unless every tensor is on the first one's device.
func sameDevice(op string, ts ...*Tensor) {
	for _, u := range ts[1:] {
		if u.dev != ts[0].dev {
			panic(errorf(op, "tensors on different devices: %v %v on %s and %v %v on %s; move one with To",
				ts[0].dtype, ts[0].shape, ts[0].dev.name, u.dtype, u.shape, u.dev.name))
		}
	}
}

// sameFloat panics unless every tensor is a float of the first one's dtype.
func sameFloat(op string, ts ...*Tensor) {
	for _, u := range ts {
		if !u.dtype.IsFloat() {
			panic(errorf(op, "needs float tensors, got %v %v; convert with Cast(forge.Float32)", u.dtype, u.shape))
		}
		if u.dtype != ts[0].dtype {
			panic(errorf(op, "dtypes differ: %v %v and %v %v; convert one with Cast", ts[0].dtype, ts[0].shape, u.dtype, u.shape))
		}
	}
	sameDevice(op, ts...)
}
