#!/usr/bin/env bash
# The release build of the daemon, optimised with the execution profile of
# real scrapes in exporter/pgo/usescope.profdata (profile-guided
# optimisation: about 6 % less CPU per scrape with cold caches,
# BENCHMARKS.md, "Build and encoding choices").
# Every script that builds the release daemon calls this one, so the
# release dependencies are built once, with one set of flags.
#
#   scripts/build-release.sh [more cargo build options: -q, -p floor-reader]
#
# The path must be absolute: cargo runs rustc for each dependency in that
# dependency's own directory. scripts/pgo-profile.sh makes the profile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=$root/exporter/pgo/usescope.profdata
[ -f "$profile" ] || { echo "build-release: $profile is missing (scripts/pgo-profile.sh makes it)" >&2; exit 1; }
cd "$root"
RUSTFLAGS="-Cprofile-use=$profile${RUSTFLAGS:+ $RUSTFLAGS}" exec cargo build --release --locked -p usescope "$@"
