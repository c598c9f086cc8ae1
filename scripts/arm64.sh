#!/usr/bin/env bash
# Runs test suites built for linux/arm64 under qemu user-mode emulation, so
# that an x86 machine checks the arm64 code paths (the portable Go kernels
# an Apple or Graviton CPU runs, Go's fused multiply-adds on arm64, the
# armv8 OpenBLAS) before an arm64 user does.
#   scripts/arm64.sh [packages…]     default: ./forge/cpu/ ./forge/forgetest/
# On Debian/Ubuntu as root (or with sudo) it installs what it needs:
# qemu-user-static, and libc6 and libopenblas0-pthread for arm64 (the
# binaries load OpenBLAS with purego, which needs the arm64 dynamic
# loader). Elsewhere it says what is missing and exits 1. Each test binary
# runs in its package's directory with -test.short; the exit status is
# non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./forge/cpu/ ./forge/forgetest/)

need=()
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
[ -e /lib/ld-linux-aarch64.so.1 ] || need+=(libc6:arm64)
[ -e /usr/lib/aarch64-linux-gnu/libopenblas.so.0 ] || ls /usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0 >/dev/null 2>&1 ||
  need+=(libopenblas0-pthread:arm64)
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    echo "arm64: needs ${need[*]} (qemu user-mode emulation and arm64 libc, OpenBLAS); install them and run again" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "arm64: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
fail=0
for p in "${pkgs[@]}"; do
  name=$(echo "${p#./}" | tr / - | sed 's/-$//')
  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 "$go" test -c -o "$bin/$name.test" "$p"
  if [ ! -x "$bin/$name.test" ]; then
    echo "ok   $p (no test files)"
    continue
  fi
  start=$SECONDS
  if (cd "$p" && qemu-aarch64-static "$bin/$name.test" -test.short); then
    echo "ok   $p (arm64 under qemu, $((SECONDS - start)) s)"
  else
    echo "FAIL $p (arm64 under qemu)"
    fail=1
  fi
done
exit $fail
