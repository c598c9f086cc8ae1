#!/usr/bin/env bash
# Installs the system packages Forge uses, if they are missing.
#   scripts/setup.sh          OpenBLAS (fast CPU matmul)
#   scripts/setup.sh bench    + numpy, the side-by-side baseline of `make bench`
#   scripts/setup.sh golden   + PyTorch, to regenerate the parity fixtures
#   scripts/setup.sh test     + PyTorch, for the tests that check exports and
#                             file formats against it, and clang (`make test`)
#   scripts/setup.sh metal-emu  clang, which compiles the Metal kernels for the
#                             emulation driver (`make test-metal-emu`)
# On Debian/Ubuntu it uses apt-get (as root, or through sudo). Elsewhere it
# says what to install and carries on: Forge runs without OpenBLAS (a pure-Go
# matmul serves, and says so), and macOS uses Accelerate.
set -euo pipefail

want=()
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_py() { /usr/bin/python3 -c "import $1" >/dev/null 2>&1; }
# The Metal emulator compiles MSL as C++ with clang++-19 (or another
# clang++ found on PATH; FORGE_EMU_CLANG names one).
have_clang() {
  [ -n "${FORGE_EMU_CLANG:-}" ] || command -v clang++-19 >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1
}

if [ "$(uname -s)" = Linux ]; then
  have_lib libopenblas.so.0 || want+=(libopenblas0)
  case "${1:-}" in
    bench) have_py numpy || want+=(python3-numpy) ;;
    golden) have_py numpy || want+=(python3-numpy); have_py torch || want+=(python3-torch) ;;
    test)
      have_py numpy || want+=(python3-numpy); have_py torch || want+=(python3-torch)
      have_clang || want+=(clang-19)
      ;;
    metal-emu) have_clang || want+=(clang-19) ;;
  esac
fi
[ ${#want[@]} -eq 0 ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${want[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${want[@]}" >/dev/null
else
  echo "setup: please install ${want[*]} with your package manager" >&2
fi
