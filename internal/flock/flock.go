// Package flock takes the exclusive, non-blocking file locks that make a
// directory single-writer: a run directory (forge/train) and a model
// repository (forge/fmodel). The lock belongs to the open file, so the
// kernel drops it when the holder exits, however it exits.
package flock

import "errors"

// ErrLocked is what TryLock returns when another open file holds the lock.
var ErrLocked = errors.New("locked")
