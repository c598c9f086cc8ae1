// Package forge is Forge's tensor library: eager, inspectable tensors with
// reverse-mode automatic differentiation, running on any registered backend
// (the CPU backend is always available; Metal on Apple silicon).
//
//	x := forge.Randn(4, 8).RequiresGrad()
//	w := forge.Randn(8, 2).RequiresGrad()
//	loss := x.MatMul(w).Tanh().Sum()
//	loss.Backward()
//	fmt.Println(w.Grad())
//
// # Eager semantics, asynchronous execution
//
// Every op runs (or, on a GPU, is queued) when it is called. Anything that
// reads values — Item, Data, String, Stats — synchronises first, so users
// never call a sync for correctness.
//
// # Autograd
//
// Ops on tensors that require gradients record a graph; Backward walks it in
// reverse topological order. Each op's backward rule is written next to its
// forward. Gradients accumulate in leaf tensors (those created by the user
// with RequiresGrad) until ZeroGrad; intermediate tensors do not keep theirs.
// Backward releases the graph as it goes: each node drops its saved tensors
// once its rule has run, so activations can be collected before the
// backward pass ends. NoGrad(fn) runs fn without recording.
//
// Checkpoint(fn, x) trades compute for memory: it keeps only x and fn(x),
// and the backward runs fn again, with the generators fn drew from put
// back, to backpropagate through it; the gradients are those of fn(x)
// bit for bit on a deterministic backend.
//
// Graph recording and the default device are process-wide settings: build
// and differentiate a graph from one goroutine at a time.
//
// # Devices
//
// New tensors go to DefaultDevice: the device UseDevice or
// SetDefaultDevice set, else the backend FORGE_BACKEND names, else Metal
// on Apple silicon when it opens, else the CPU. DefaultDeviceChoice says
// which and why, with a notice for front ends to print once (the library
// prints nothing); DeviceNames lists the devices of the build.
//
// # Error handling
//
// Misuse — mismatched shapes, dtypes or devices, indices out of range — is a
// programming error and panics with an *Error whose message names the op
// and the shapes:
//
//	forge: matmul: inner dimensions differ: [2 3] @ [4 5]
//
// Try(fn) runs fn and returns such a panic as an error, so a REPL line or a
// notebook cell can fail without ending the session. Operations that touch
// files return errors in the usual way.
//
// # Dtypes
//
// Float32 everywhere; Float64 on the CPU (for gradient checks); Int32 for
// token ids and indices. Binary ops need operands of one dtype: convert
// with Cast.
//
// # Randomness
//
// Random tensors come from a Generator (xoshiro256** seeded through
// SplitMix64, see Generator) run on the host, so the same seed gives the
// same values on every backend.
//
// # Kernels
//
// Every kernel call goes through one dispatch point that can report the
// kernel's name, the path that ran, its shapes, dtype, phase (forward,
// backward, optimizer), scope, FLOPs, bytes and duration to an observer,
// which also hears each Scope end; see SetObserver and Scope.
package forge
