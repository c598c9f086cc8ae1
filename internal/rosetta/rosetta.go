// Package rosetta tells whether this process is an amd64 build running
// under Rosetta 2 on Apple silicon, where Metal is out of reach (the GPU
// backend is built for darwin/arm64 only) although the machine has the GPU.
package rosetta

// Hint is what to say instead of "needs Apple silicon" when Translated.
const Hint = "running under Rosetta (an amd64 build on Apple silicon): Metal needs the arm64 build — " +
	"GOARCH=arm64 go build / install the darwin-arm64 binary"
