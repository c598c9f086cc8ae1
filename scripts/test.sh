#!/usr/bin/env bash
# The full test run, as CI does it (`make test`, through .ci/run). Every stage
# runs even when an earlier one fails, and a table at the end says how each
# one went.
#
#   scripts/test.sh             every stage, in order
#   scripts/test.sh --list      the stage names, one a line
#   scripts/test.sh NAME…       only the named stages, in the list's order; a
#                               name may be a shell pattern ('blas-*' 'emu-*'),
#                               e.g. scripts/test.sh go-test to rerun a failure
#
# The stages: setup (scripts/setup.sh test), lint, darwin (make check-darwin),
# go-test (go test ./...), blas-<core> (the BLAS and conformance suites,
# ./forge/cpu/ and ./forge/forgetest/, with OPENBLAS_CORETYPE=<core> for each
# OpenBLAS core this CPU can execute, as go run ./tests/blascores lists them),
# blas-off (the same suites with FORGE_BLAS=off, the pure-Go matmul), gemm-avx2
# and gemm-go (./forge/cpu/ on the Go matmul's other micro-kernels,
# FORGE_GEMM_KERNEL; amd64 only), arm64 (the same suites built for linux/arm64
# and run under qemu, scripts/arm64.sh; on other hosts than amd64 skipped, as
# go-test has run them natively), repl-equal (200 tiny steps through the REPL
# against forge train), emu-forward, emu-reverse and emu-random (the suite on
# the Metal emulator under each thread schedule; EMU_SEED=n repeats a random
# one), fuzz (every fuzz target for 20000 runs), bench-smoke and benchtrain-smoke (one
# quick round of each benchmark tool) and notebooks (scripts/notebooks.sh test).
#
# Each stage's output is shown as it runs, after a header line naming the
# stage, and kept in ${FORGE_ARTIFACTS:-artifacts}/test/<nn>-<stage>.log (nn is
# the stage's place in the full list). The closing table — stage, ok / FAIL /
# skipped, time (m:ss), and for a failure its log and first failing test (the
# first `--- FAIL:` of go test, with its package) or else its first line that
# looks like an error — is also written to .../test/summary.txt. A full run
# first removes the logs of the previous one.
#
# Exit status: 0 if every stage passed (or was skipped), 1 if one failed, 2 for
# a bad argument, 130 after Ctrl-C (which ends the current stage and the run,
# and prints the table so far).
#
# For the runner's own test (tests/testsh): FORGE_TEST_STAGES_FILE names a file
# of "name<TAB>command" lines (blank lines and # comments ignored) that
# replaces the stage list; a command "SKIP: reason" marks a skipped stage.
set -uo pipefail # no -e: a failing stage must not end the run

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${FORGE_ARTIFACTS:-}" ]; then
  case $FORGE_ARTIFACTS in /*) ;; *) FORGE_ARTIFACTS=$PWD/$FORGE_ARTIFACTS ;; esac
  export FORGE_ARTIFACTS # the same directory for scripts/notebooks.sh
  art=$FORGE_ARTIFACTS
else
  art=$root/artifacts
fi
logdir=$art/test
stages_file=${FORGE_TEST_STAGES_FILE:-}
case $stages_file in '' | /*) ;; *) stages_file=$PWD/$stages_file ;; esac
cd "$root" || exit 2
export PATH="$PATH:/usr/local/go/bin"
go=${GO:-go}

usage() { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p;}' "$0"; }
die() { echo "scripts/test.sh: $*" >&2; exit 2; }

names=()
cmds=()
add() {
  case $1 in '' | *[!A-Za-z0-9._-]*) die "bad stage name '$1' (letters, digits, . _ -)" ;; esac
  local n
  for n in ${names[@]+"${names[@]}"}; do [ "$n" != "$1" ] || die "stage $1 listed twice"; done
  names+=("$1")
  cmds+=("$2")
}

builtin_stages() {
  local mk="make --no-print-directory" suites="./forge/cpu/ ./forge/forgetest/" cores core
  add setup "scripts/setup.sh test"
  add lint "$mk lint"
  add darwin "$mk check-darwin"
  add go-test "$go test -timeout 30m ./..."
  # The cores come from the CPU's features alone (no OpenBLAS needed yet). If
  # the lister does not build, a stage runs it again to show why.
  if cores=$("$go" run ./tests/blascores 2>/dev/null) && [[ $cores =~ ^[A-Za-z0-9\ ]*$ ]]; then
    for core in $cores; do
      add "blas-$core" "OPENBLAS_CORETYPE=$core $go test -timeout 30m $suites"
    done
  else
    add blas-cores "$go run ./tests/blascores"
  fi
  add blas-off "FORGE_BLAS=off $go test -timeout 30m $suites"
  # -count=1: forge/cpu reads FORGE_GEMM_KERNEL in an init function, which
  # go test's cache does not see, so it would hand back blas-off's result.
  if [ "$("$go" env GOARCH 2>/dev/null)" = amd64 ]; then
    add gemm-avx2 "FORGE_BLAS=off FORGE_GEMM_KERNEL=avx2 $go test -count=1 ./forge/cpu/"
    add gemm-go "FORGE_BLAS=off FORGE_GEMM_KERNEL=go $go test -count=1 ./forge/cpu/"
    add arm64 "scripts/arm64.sh $suites"
  else
    add gemm-avx2 "SKIP: amd64 only"
    add gemm-go "SKIP: amd64 only"
    add arm64 "SKIP: go-test ran natively on $("$go" env GOARCH 2>/dev/null)"
  fi
  add repl-equal "FORGE_REPL_TINY=1 $go test -run TestReplMatchesTrain ./repl/"
  # go test ./... has run ./metal/... and ./kernels/ (emulated) already.
  add emu-forward "$mk test-metal-emu-forward EMU_PKGS=./forge/forgetest/"
  add emu-reverse "$mk test-metal-emu-reverse"
  add emu-random "$mk test-metal-emu-random EMU_SEED=${EMU_SEED:-$(date +%s)}"
  # forge doctor end to end on the emulator (its package tests, in go-test,
  # run it on the cpu and on metal-emu and plant wrong kernel results).
  add doctor-emu "FORGE_BACKEND=metal-emu $go run ./cmd/forge doctor --short --out artifacts/test >/dev/null"
  # A count, not a duration: with a -fuzztime duration Go 1.26's fuzz
  # coordinator can report "context deadline exceeded" at the deadline on
  # a busy machine, a failure with no failing input (go.dev/issue/75804,
  # fixed in Go 1.27). 20000 runs take 1–10 s a target here.
  add fuzz "$mk fuzz FUZZTIME=20000x"
  add bench-smoke "$go run ./tests/bench -quick -python \"\" -idle 0 -repeats 1 >/dev/null"
  add benchtrain-smoke "$go run ./tests/benchtrain -quick >/dev/null"
  add notebooks "scripts/notebooks.sh test"
}

file_stages() {
  local line tab=$'\t'
  [ -r "$1" ] || die "FORGE_TEST_STAGES_FILE: cannot read $1"
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%$'\r'}
    case $line in '' | '#'*) continue ;; *"$tab"*) ;; *) die "$1: no tab in line '$line'" ;; esac
    add "${line%%"$tab"*}" "${line#*"$tab"}"
  done <"$1"
}

list_only=0
pats=()
for a in "$@"; do
  case $a in
    --list) list_only=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option $a (see scripts/test.sh --help)" ;;
    *) pats+=("$a") ;;
  esac
done

if [ -n "$stages_file" ]; then
  file_stages "$stages_file"
else
  builtin_stages
fi
total=${#names[@]}

if [ $list_only = 1 ]; then
  printf '%s\n' ${names[@]+"${names[@]}"}
  exit 0
fi

# The selection, as a flag per stage.
want=()
all=1
[ -z "${pats[*]+set}" ] || all=0
for ((i = 0; i < total; i++)); do want[i]=$all; done
for p in ${pats[@]+"${pats[@]}"}; do
  hit=0
  for ((i = 0; i < total; i++)); do
    # shellcheck disable=SC2254 # p is a pattern
    case ${names[i]} in $p) want[i]=1; hit=1 ;; esac
  done
  [ $hit = 1 ] || die "no stage '$p'; the stages: $(echo ${names[@]+"${names[@]}"})"
done

mmss() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
rel() { case $1 in "$root"/*) echo "${1#"$root"/}" ;; *) echo "$1" ;; esac; }

# first_failure LOG: what the table says about a failed stage. For go test
# output, the first failing test — the deepest subtest under the first
# `--- FAIL:` — and the package of the FAIL line after it; otherwise the first
# line that looks like an error (with the next line if it ends in a colon), or
# the last non-empty line.
first_failure() {
  awk '
    function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t\r]+$/, "", s); return s }
    NR == 1 && /^==> \[[0-9]+\/[0-9]+\] / { next }           # our header
    { line = trim($0) }
    line != "" && !/^make(\[[0-9]+\])?: \*\*\* / { last = line }
    want_next && line != "" { err = err " " line; want_next = 0 }
    /^[ \t]*--- FAIL: / {
      name = line; sub(/^--- FAIL: /, "", name); sub(/ \([0-9.]+s\)$/, "", name)
      if ($0 ~ /^--- FAIL: /) ntop++
      if (test == "") { test = name; deeper = 1 }
      else if (deeper && index(name, test "/") == 1) test = name
      else deeper = 0
      next
    }
    /^FAIL\t/ {
      split($0, f, "\t"); p = trim(f[2])
      if (test != "" && pkg == "") pkg = p
      if (nopkg == "") nopkg = p
      next
    }
    /^FAIL$/ || /^make(\[[0-9]+\])?: \*\*\* / { next }
    err == "" && (line ~ /\.go:[0-9]+(:[0-9]+)?: / ||
        tolower(line) ~ /(^|[^a-z])(error|errors|fail|failed|failure|fatal|panic|cannot|unable|not found|no such file|denied|needed|missing|undefined|timed out)([^a-z]|$)/) {
      err = line; want_next = (line ~ /:$/)
    }
    END {
      if (test != "") {
        s = test; if (pkg != "") s = s " (" pkg ")"
        if (ntop > 1) s = s " and " (ntop - 1) " more failed test" (ntop > 2 ? "s" : "")
      } else {
        s = (err != "") ? err : last
        if (nopkg != "" && index(s, nopkg) == 0) s = s " (" nopkg ")"
      }
      if (length(s) > 160) s = substr(s, 1, 157) "..."
      print s
    }
  ' "$1"
}

mkdir -p "$logdir" || exit 2
if [ $all = 1 ]; then rm -f "$logdir"/[0-9][0-9]-*.log "$logdir/summary.txt"; fi

nsel=0
for ((i = 0; i < total; i++)); do [ "${want[i]}" = 1 ] && nsel=$((nsel + 1)); done
echo "scripts/test.sh: $nsel stage(s), logs in $(rel "$logdir")/"

interrupted=0
trap 'interrupted=1' INT
results=() secs=() logs=() details=()
run_start=$SECONDS
k=0
for ((i = 0; i < total; i++)); do
  [ "${want[i]}" = 1 ] || continue
  k=$((k + 1))
  name=${names[i]} cmd=${cmds[i]}
  log=$logdir/$(printf %02d $((i + 1)))-$name.log
  logs[i]=$log secs[i]=0 details[i]=""
  if [ $interrupted = 1 ]; then
    results[i]=skipped details[i]="not run (interrupted)"
    continue
  fi
  echo "==> [$k/$nsel] $name: $cmd" | tee "$log"
  case $cmd in
    SKIP:*)
      results[i]=skipped details[i]=$(echo "${cmd#SKIP:}" | sed 's/^ *//')
      echo "<== $name: skipped (${details[i]})" | tee -a "$log"
      echo
      continue
      ;;
  esac
  start=$SECONDS
  bash -c "$cmd" </dev/null 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  secs[i]=$((SECONDS - start))
  if [ $interrupted = 1 ]; then
    results[i]=FAIL details[i]="interrupted"
  elif [ "$rc" -eq 0 ]; then
    results[i]=ok
  else
    results[i]=FAIL details[i]=$(first_failure "$log")
  fi
  echo "<== $name: ${results[i]} in $(mmss "${secs[i]}") (exit $rc)" | tee -a "$log"
  echo
done
trap - INT

# The table.
w=5
for ((i = 0; i < total; i++)); do
  [ "${want[i]}" = 1 ] && [ ${#names[i]} -gt $w ] && w=${#names[i]}
done
lw=3 nfail=0
for ((i = 0; i < total; i++)); do
  [ "${want[i]}" = 1 ] && [ "${results[i]}" = FAIL ] || continue
  nfail=$((nfail + 1))
  l=$(rel "${logs[i]}")
  [ ${#l} -gt $lw ] && lw=${#l}
done
summary=$logdir/summary.txt
{
  printf "%-${w}s  %-7s  %5s  %-${lw}s  %s\n" stage result time log "first failure"
  for ((i = 0; i < total; i++)); do
    [ "${want[i]}" = 1 ] || continue
    l=""
    [ "${results[i]}" = FAIL ] && l=$(rel "${logs[i]}")
    printf "%-${w}s  %-7s  %5s  %-${lw}s  %s\n" "${names[i]}" "${results[i]}" "$(mmss "${secs[i]}")" "$l" "${details[i]}" |
      sed 's/ *$//'
  done
  if [ $nfail -gt 0 ]; then verdict=FAIL note="$nfail of $nsel stages failed"; else verdict=ok note=""; fi
  printf "%-${w}s  %-7s  %5s  %s\n" total "$verdict" "$(mmss $((SECONDS - run_start)))" "$note" | sed 's/ *$//'
} >"$summary"
echo "summary ($(rel "$summary")):"
cat "$summary"

[ $interrupted = 1 ] && exit 130
[ $nfail -eq 0 ]
