#!/usr/bin/env bash
# The teaching notebooks in notebooks/, run by the GoNB kernel.
#   scripts/notebooks.sh            install what is missing, open Jupyter on notebooks/
#   scripts/notebooks.sh install    only install
#   scripts/notebooks.sh test [NB…] execute every notebook (or the named ones)
#                                   headlessly with nbconvert into a temp dir,
#                                   check the outputs, then render their charts
#                                   in headless Chromium and check that each one
#                                   drew (internal/nbshot; one screenshot per
#                                   notebook in ${FORGE_ARTIFACTS:-artifacts}/notebooks)
#                                   (`make test-notebooks`)
# Installs, when missing: Jupyter with nbconvert (Debian packages, through
# apt-get as root or sudo; elsewhere it says what to install), and the GoNB
# kernel with goimports and gopls, built from the pinned tools module
# notebooks/tools into notebooks/tools/bin and registered with Jupyter; for
# install and test, also Chromium (Debian's chromium package) when neither
# chromium nor chromium-browser is on PATH.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
nbdir=$root/notebooks
tools=$nbdir/tools
bin=$tools/bin
mode=${1:-open}
[ $# -gt 0 ] && shift

# Debian's Jupyter lives under /usr/bin/python3; a pyenv python3 on PATH lacks it.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
have_py() { "$py" -c "import $1" >/dev/null 2>&1; }

apt_install() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@" >/dev/null
}

install_jupyter() {
  local want=()
  have_py notebook || want+=(jupyter jupyter-notebook)
  have_py nbconvert || want+=(python3-nbconvert)
  have_py nbclient || want+=(python3-nbclient)
  have_py jupyter_client || want+=(python3-jupyter-client)
  [ ${#want[@]} -eq 0 ] && return 0
  if command -v apt-get >/dev/null 2>&1; then
    echo "notebooks: installing ${want[*]} (a few minutes)" >&2
    apt_install "${want[@]}"
  else
    echo "notebooks: please install Jupyter (notebook and nbconvert), e.g. 'brew install jupyterlab' or 'pipx install notebook nbconvert'" >&2
    exit 1
  fi
}

# The chart check (internal/nbshot) renders the executed notebooks in
# headless Chromium: FORGE_CHROMIUM names one off PATH (Chrome on a Mac:
# "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome").
# The check also draws a control page under require.js, as classic
# Notebook loads it: FORGE_REQUIREJS names a require.js off Debian's path.
requirejs=${FORGE_REQUIREJS:-/usr/share/javascript/requirejs/require.min.js}
install_chromium() {
  if [ ! -f "$requirejs" ] && command -v apt-get >/dev/null 2>&1; then
    echo "notebooks: installing libjs-requirejs for the chart check" >&2
    apt_install libjs-requirejs
  fi
  if [ -n "${FORGE_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1; then
    echo "notebooks: installing chromium for the chart check (a minute or two)" >&2
    apt_install chromium
  else
    echo "notebooks: no Chromium for the chart check of 'test': put a 'chromium' on PATH or set FORGE_CHROMIUM to Chrome's executable" >&2
    [ "$mode" = test ] && exit 1
  fi
  return 0
}

install_kernel() {
  local t
  for t in gonb goimports gopls; do
    if [ ! -x "$bin/$t" ]; then
      echo "notebooks: building gonb, goimports and gopls into notebooks/tools/bin (cold: ~3 min)" >&2
      (cd "$tools" && GOBIN=$bin GOFLAGS=-mod=mod go install tool)
      break
    fi
  done
  if ! jupyter kernelspec list 2>/dev/null | grep -q '^ *gonb '; then
    echo "notebooks: registering the GoNB kernel with Jupyter" >&2
    gonb --install --raw_error >/dev/null
  fi
}

# Jupyter and the kernel it starts must find go, gonb, goimports and gopls.
export PATH=$bin:$PATH:$(go env GOROOT)/bin
install_jupyter
install_kernel
case "$mode" in install|test) install_chromium ;; esac

case "$mode" in
  install) exit 0 ;;
  open)
    cd "$nbdir"
    exec "$py" -m notebook --notebook-dir="$nbdir" "$@"
    ;;
  test) ;;
  *) echo "usage: scripts/notebooks.sh [open|install|test [notebook…]]" >&2; exit 2 ;;
esac

# Headless run: execute each notebook in place (so GONB_DIR is notebooks/ and
# the first cell's replace points at this repository), write the executed copy
# to a temp dir, keep the runs there too, then check the outputs.
out=$(mktemp -d "${TMPDIR:-/tmp}/forge-notebooks.XXXXXX")
export FORGE_NOTEBOOK_RUNS=$out/runs
list=("$@")
[ ${#list[@]} -gt 0 ] || list=("$nbdir"/[0-9]*.ipynb)
status=0
executed=()
for nb in "${list[@]}"; do
  nb=$(cd "$(dirname "$nb")" && pwd)/$(basename "$nb")
  name=$(basename "$nb")
  start=$(date +%s)
  if ! (cd "$nbdir" && "$py" -m nbconvert --to notebook --execute \
      --ExecutePreprocessor.kernel_name=gonb --ExecutePreprocessor.timeout=600 \
      --output-dir="$out" --output="$name" "$nb" >"$out/${name%.ipynb}.log" 2>&1); then
    echo "FAIL $name: nbconvert failed ($(( $(date +%s) - start ))s)"; tail -30 "$out/${name%.ipynb}.log"
    status=1
    continue
  fi
  executed+=("$out/$name")
  if "$py" "$tools/check.py" "$out/$name"; then
    echo "ok   $name ($(( $(date +%s) - start ))s)"
  else
    echo "FAIL $name ($(( $(date +%s) - start ))s)"; status=1
  fi
done
echo "executed notebooks: $out"

# The charts, rendered in headless Chromium: every chart's plot area must
# hold drawn pixels (a blank or never-drawn chart fails), after a negative
# control (a drawn, an empty and a never-drawn chart) that the measurement
# must tell apart. nbshot's own tests run first and may not skip for want
# of Chromium. One screenshot per notebook is kept as an artifact.
if [ $status -ne 0 ]; then
  echo "charts: not checked in Chromium, a notebook failed above"
  exit $status
fi
art=${FORGE_ARTIFACTS:-$root/artifacts}/notebooks
mkdir -p "$art"
art=$(cd "$art" && pwd)
rm -f "$art"/*.png
start=$(date +%s)
export FORGE_REQUIRE_CHROMIUM=1
if (cd "$root" && go test -count=1 ./internal/nbshot >"$out/nbshot-test.log" 2>&1); then
  echo "ok   nbshot tests ($(( $(date +%s) - start ))s)"
else
  cat "$out/nbshot-test.log"; echo "FAIL nbshot tests"; status=1
fi
if ! (cd "$root" && go run ./internal/nbshot -artifacts "$art" -requirejs "$requirejs" "${executed[@]}"); then
  status=1
fi
echo "charts: checked in Chromium in $(( $(date +%s) - start ))s, screenshots in $art"
exit $status
