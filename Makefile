# Forge for Go. `make run` runs the demo; `make test` runs every test.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: setup run test test-fast bench check-darwin lint golden

setup:
	@scripts/setup.sh

run: setup
	$(GO) run ./cmd/forge

# The full test run, as CI does it: lint, the darwin cross-build, every
# package's tests on the CPU backend, and the backend suite again with the
# pure-Go matmul (no BLAS), and a one-round smoke run of the benchmark tool
# so it cannot rot.
test: setup lint check-darwin
	$(GO) test ./...
	FORGE_BLAS=off $(GO) test ./forge/cpu/ ./forge/forgetest/
	$(GO) run ./tests/bench -quick -python "" -idle 0 -repeats 1 >/dev/null

test-fast:
	$(GO) test ./...

# Side-by-side benchmark against numpy (OpenBLAS) in one run.
bench:
	@scripts/setup.sh bench
	$(GO) run ./tests/bench

# The Metal users' platform must always build (purego, no cgo).
check-darwin:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Regenerate the PyTorch parity fixtures (Debian's python3-torch).
golden:
	@scripts/setup.sh golden
	/usr/bin/python3 tests/torch_golden.py
	/usr/bin/python3 tests/torch_optim.py
