#!/usr/bin/env bash
# make test-metal: the checks that need a Mac with Apple silicon.
#
#   1. forge doctor on the GPU (FORGE_BACKEND=metal): kernels compiled by the
#      driver, the conformance checks, a shadow-parity training step against
#      the CPU and timings beside the seed's figures; the report goes to
#      artifacts/ (attach it to a bug report);
#   2. the full test suite with FORGE_BACKEND=metal, under Metal's API and
#      shader validation;
#   3. Xcode's offline compiler (xcrun metal -c) on every kernels/*.metal for
#      each MSL language version the backend uses: MSL 3.1 for every file
#      (the driver's default, mslVersion in metal/driver_darwin.go) and
#      MSL 4.0 for every file too (the files with Metal 4 tensor ops,
#      matmul2d.metal, need it; the others must still compile under it).
#      Each file is compiled as the driver compiles it: the prelude
#      (forge_half.h, forge_ops.h) first, as kernels.Sources() prepends it.
#      Xcode is optional (the driver compiles at run time): without it this
#      step is skipped, and says so;
#   4. a profiled training benchmark of the small config.
#
# Every step runs even if an earlier one fails; the exit status is 1 if any
# failed. Nothing of this has run on Apple hardware yet: on Linux,
# `bash -n scripts/test-metal.sh` checks its syntax and `make test` runs
# forge doctor on the CPU and on the emulator.
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
failed=()

step() { echo; echo "== $*"; }

step "forge doctor on the GPU"
mkdir -p artifacts
if ! FORGE_BACKEND=metal "$GO" run ./cmd/forge doctor --out artifacts; then
	failed+=("forge doctor")
fi

step "the full suite on the GPU, with Metal validation"
if ! OBJC_DEBUG_MISSING_POOLS=YES MTL_DEBUG_LAYER=1 MTL_SHADER_VALIDATION=1 FORGE_BACKEND=metal \
	"$GO" test -count=1 ./...; then
	failed+=("go test ./... (FORGE_BACKEND=metal)")
fi

step "offline compile of every kernel file (xcrun metal -c)"
if xcrun -f metal >/dev/null 2>&1; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	for f in kernels/*.metal; do
		name=$(basename "$f")
		src="$tmp/$name"
		{
			for h in forge_half.h forge_ops.h; do
				printf '#line 1 "%s"\n' "$h"
				cat "kernels/$h"
			done
			printf '#line 1 "%s"\n' "$name"
			cat "$f"
		} >"$src"
		versions="3.1 4.0"
		if grep -Eq '^[[:space:]]*#[[:space:]]*include.*(<metal_tensor>|MetalPerformancePrimitives)' "$f"; then
			versions="4.0" # Metal 4 tensor ops: MSL 4.0 only
		fi
		for v in $versions; do
			if xcrun -sdk macosx metal -std="metal$v" -c "$src" -o "$tmp/${name%.metal}-$v.air"; then
				echo "ok   $name (MSL $v)"
			else
				echo "FAIL $name (MSL $v)"
				failed+=("xcrun metal -std=metal$v $name")
			fi
		done
	done
else
	echo "Xcode's metal compiler not found: skipped offline compile (xcrun -f metal failed; Xcode is optional, the driver compiles the kernels at run time)"
fi

step "profiled training benchmark of the small config"
if ! FORGE_BACKEND=metal "$GO" run ./cmd/forge bench step --config small --profile; then
	failed+=("forge bench step")
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "make test-metal: ${#failed[@]} step(s) failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "make test-metal: every step passed"
