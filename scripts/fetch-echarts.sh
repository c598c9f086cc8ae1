#!/usr/bin/env bash
# fetch-echarts.sh: fetch the echarts library that notebook charts inline.
#
# Downloads the echarts package from the npm registry with `npm pack`,
# extracts dist/echarts.min.js and the licence into notebook/assets/, and
# writes PROVENANCE.md with the package, version, checksums and date.
# Run it from anywhere; it needs npm, tar and sha256sum.
set -euo pipefail

VERSION="${ECHARTS_VERSION:-5.6.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/notebook/assets"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

cd "$TMP"
TGZ="$(npm pack --silent "echarts@$VERSION" | tail -n 1)"
tar -xzf "$TGZ" package/dist/echarts.min.js package/LICENSE
mkdir -p "$OUT"
cp package/dist/echarts.min.js "$OUT/echarts.min.js"
cp package/LICENSE "$OUT/ECHARTS-LICENSE"
if [ -f package/NOTICE ]; then cp package/NOTICE "$OUT/ECHARTS-NOTICE"; fi

TGZ_SHA="$(sha256sum "$TGZ" | cut -d' ' -f1)"
JS_SHA="$(sha256sum "$OUT/echarts.min.js" | cut -d' ' -f1)"
LIC_SHA="$(sha256sum "$OUT/ECHARTS-LICENSE" | cut -d' ' -f1)"
INTEGRITY="$(npm view "echarts@$VERSION" dist.integrity 2>/dev/null || true)"

cat >"$OUT/PROVENANCE.md" <<MD
# Third-party assets

| File | Source |
|---|---|
| \`echarts.min.js\` | \`package/dist/echarts.min.js\` of the npm package \`echarts@$VERSION\` |
| \`ECHARTS-LICENSE\` | \`package/LICENSE\` of the same package (Apache License 2.0) |

- Package: [echarts](https://www.npmjs.com/package/echarts) $VERSION (Apache ECharts, Apache-2.0)
- Fetched with: \`npm pack echarts@$VERSION\` by \`scripts/fetch-echarts.sh\`
- Tarball: \`$TGZ\`, sha256 \`$TGZ_SHA\`${INTEGRITY:+, npm integrity \`$INTEGRITY\`}
- echarts.min.js: sha256 \`$JS_SHA\`, $(wc -c <"$OUT/echarts.min.js") bytes
- ECHARTS-LICENSE: sha256 \`$LIC_SHA\`
- Date: $(date -u +%Y-%m-%d)

The file is unmodified. The notebook package embeds it (go:embed); the first
chart of a kernel session carries it gzip-compressed and base64-encoded as inert
data, and the charts' loader decompresses it in the browser and runs it as
\`new Function("define","module","exports", source).call(window)\`, so that it
registers as \`window.echarts\` under require.js.
MD
echo "echarts $VERSION -> $OUT (echarts.min.js sha256 $JS_SHA)"
