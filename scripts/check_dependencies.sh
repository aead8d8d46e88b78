#!/usr/bin/env bash
# Fails when a crate is declared but unused, or when a locked crate is one
# its authors have deprecated.
#
# - Unused: cargo-machete (installed by scripts/setup.sh) over every
#   Cargo.toml in the tree (the workspace, bench/floor-reader, fuzz/). It
#   reads the sources, so a crate used only through a macro path it cannot
#   see would need an entry in [package.metadata.cargo-machete] ignored,
#   with a comment saying why.
# - Deprecated: crates.io has no "unmaintained" flag, and RustSec's advisory
#   database (what cargo-deny's advisories check reads) lives on GitHub,
#   which this build machine cannot reach. What the lock files do show is
#   the "+deprecated" build metadata authors publish as a last release
#   (serde_yaml 0.9.34+deprecated was one), so that is what is checked.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
if ! cargo machete; then
  echo "check_dependencies: cargo-machete found unused dependencies (above)" >&2
  status=1
fi
deprecated=$(grep -Hn '^version = ".*+deprecated"' Cargo.lock fuzz/Cargo.lock || true)
if [ -n "$deprecated" ]; then
  echo "check_dependencies: deprecated crates in the lock files:" >&2
  while IFS= read -r hit; do
    file=${hit%%:*}
    line=$(echo "$hit" | cut -d: -f2)
    name=$(sed -n "$((line - 1))p" "$file")
    echo "  $file:$line: $name ${hit#*:*:}" >&2
  done <<<"$deprecated"
  status=1
fi
exit $status
