#!/usr/bin/env bash
# Re-vendor the console's chart library (uPlot) from npm at a pinned version into
# client/dashboard/static/vendor/, with its LICENSE and a VERSION note. Needs node/npm; run by hand.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${UPLOT_VERSION:-1.6.31}"
DEST="$ROOT/client/dashboard/static/vendor"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
npm pack --silent "uplot@$VERSION" >/dev/null
tar xzf "uplot-$VERSION.tgz"
mkdir -p "$DEST"
cp package/dist/uPlot.iife.min.js package/dist/uPlot.min.css "$DEST/"
cp package/LICENSE "$DEST/uPlot.LICENSE"
{
  echo "uPlot $VERSION from the npm registry (npm pack uplot@$VERSION): dist/uPlot.iife.min.js, dist/uPlot.min.css"
  echo "sha256:"
  (cd "$DEST" && sha256sum uPlot.iife.min.js uPlot.min.css)
  echo "Reproduce: scripts/vendor-js.sh"
} >"$DEST/VERSION"
echo "vendored uPlot $VERSION into $DEST"
