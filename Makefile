# Forge for Go. `make run` opens the REPL on the built-in corpus; `make test` runs every test.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: setup run repl test test-fast bench check-darwin lint golden fuzz notebook test-notebooks test-metal test-metal-emu \
	test-metal-emu-setup test-metal-emu-forward test-metal-emu-reverse test-metal-emu-random

setup:
	@scripts/setup.sh

run: setup
	$(GO) run ./cmd/forge repl

repl: run

# The full test run, as CI does it (scripts/test.sh): setup, lint, the
# darwin cross-build, every package's tests on the CPU backend, the BLAS and
# conformance suites again under each OpenBLAS core this CPU can execute and
# with the pure-Go matmul (no BLAS, each of its micro-kernels), on the Metal
# kernels through the emulation driver (three thread schedules), 200 steps
# of the tiny model through the REPL against forge train, a few seconds of
# every fuzz target, a one-round smoke run of each benchmark tool so they
# cannot rot, and the teaching notebooks executed by the real GoNB kernel
# (installs Jupyter, the kernel and Chromium when missing). Every stage runs
# even if an earlier one fails; each one's log goes to artifacts/test/ and a
# table at the end says which failed and where (`scripts/test.sh --list`
# names the stages, `scripts/test.sh NAME…` reruns some).
test:
	@scripts/test.sh

# Every parser of untrusted files under the fuzzer (FUZZTIME each, a
# duration or a count like 20000x; the corpus found so far lives in
# testdata/fuzz of each package). With a duration, Go 1.26 may end a
# target with a bare "context deadline exceeded" on a loaded machine
# (go.dev/issue/75804): no input is written then, and it is not a find.
FUZZTIME ?= 30s
FUZZ_TARGETS = forge/tokenizer:FuzzRoundTrip forge/tokenizer:FuzzUnmarshal forge/data:FuzzParseTokens \
	forge/safetensors:FuzzUnmarshal forge/train:FuzzParseConfig forge/train:FuzzParseState \
	forge/fmodel:FuzzParseManifest forge/fmodel:FuzzLoad
fuzz:
	@log=$$(mktemp); for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s ./$$pkg >$$log 2>&1 || \
		{ cat $$log; rm -f $$log; exit 1; }; \
	done; rm -f $$log

test-fast:
	$(GO) test ./...

# Side-by-side benchmarks in one run: kernels against numpy (OpenBLAS),
# then GPT training steps against PyTorch (../shared/bench/torch_gpt_step.py).
bench:
	@scripts/setup.sh golden
	$(GO) run ./tests/bench
	$(GO) run ./tests/benchtrain

# The Metal users' platform must always build (purego, no cgo), and so
# must the test binaries a Mac runs for `make test-metal`.
check-darwin:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) build ./...
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...
	GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $(GO) vet ./metal/...  # the emulator's stub for systems without it
	@d=$$(mktemp -d); GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) test -c -o $$d/ ./metal/... ./forge/forgetest/ && \
		echo "darwin test binaries: $$(cd $$d && ls | tr '\n' ' ')"; rm -rf $$d

# The Metal backend. On a Mac (scripts/test-metal.sh): forge doctor on the
# GPU (report in artifacts/), the full suite with FORGE_BACKEND=metal under
# Metal's API and shader validation (training steps against the CPU among
# them), Xcode's offline compiler on every kernel file for each MSL version
# the backend uses (skipped, saying so, without Xcode), then a profiled
# training benchmark of the small config. Nothing of it has run on Apple
# hardware yet. On Linux: the same suites on the emulation driver, which
# compiles the MSL kernels with clang and runs them on the CPU (threads of a
# threadgroup as fibers), under forward, reverse and random thread
# schedules (test-metal-emu).
test-metal:
	@GO="$(GO)" scripts/test-metal.sh

# A new random schedule each run (printed; EMU_SEED=n repeats one).
EMU_SEED ?= $(shell date +%s)
# The forward-schedule run; make test has run ./metal/... and ./kernels/
# (emulated) in its go test ./... already and passes only the suite.
EMU_PKGS ?= ./metal/... ./kernels/ ./forge/forgetest/
# Each schedule is a target of its own too (make test runs them as three stages).
test-metal-emu: test-metal-emu-forward test-metal-emu-reverse test-metal-emu-random
test-metal-emu-setup:
	@scripts/setup.sh metal-emu
test-metal-emu-forward: test-metal-emu-setup
	FORGE_BACKEND=metal-emu FORGE_METAL_POOL_POISON=1 $(GO) test -timeout 30m -count=1 $(EMU_PKGS)
test-metal-emu-reverse: test-metal-emu-setup
	FORGE_BACKEND=metal-emu FORGE_EMU_SCHEDULE=reverse FORGE_EMU_TENSOR_OPS=0 FORGE_METAL_POOL_POISON=1 $(GO) test -timeout 30m -count=1 ./metal/ ./forge/forgetest/
test-metal-emu-random: test-metal-emu-setup
	FORGE_BACKEND=metal-emu FORGE_EMU_SCHEDULE=random:$(EMU_SEED) FORGE_METAL_POOL_POISON=1 $(GO) test -timeout 30m -count=1 ./metal/ ./forge/forgetest/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Regenerate the PyTorch parity fixtures (Debian's python3-torch).
golden:
	@scripts/setup.sh golden
	/usr/bin/python3 tests/torch_golden.py
	/usr/bin/python3 tests/torch_optim.py
	/usr/bin/python3 tests/torch_muon.py
	/usr/bin/python3 tests/torch_train_step.py
	/usr/bin/python3 tests/torch_moe_step.py
	/usr/bin/python3 tests/torch_qat.py

# The teaching notebooks (notebooks/, GoNB kernel): install Jupyter and the
# kernel if missing and open Jupyter; or execute every notebook headlessly
# with nbconvert and check its outputs (NB=notebooks/03-… runs just one).
notebook:
	@scripts/notebooks.sh open

test-notebooks:
	@scripts/notebooks.sh test $(NB)
