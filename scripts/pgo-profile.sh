#!/usr/bin/env bash
# Regenerates exporter/pgo/usescope.profdata, the execution profile that
# release builds are optimised with (profile-guided optimisation; see
# scripts/build-release.sh and docs/building.md).
#
#   scripts/pgo-profile.sh
#
# 1. builds an instrumented release daemon (-Cprofile-generate) in a
#    directory of its own;
# 2. runs it on a loopback port and scrapes it as Prometheus does
#    (OpenMetrics, gzip) and plain, so the profile is the one of a scrape;
# 3. stops it with SIGTERM (the counters are written at exit) and merges
#    them with llvm-profdata (rustup's llvm-tools, installed if missing),
#    keeping only the functions that ran (--sparse). Only the daemon's own
#    counters are kept: the probe loader is a child process that runs once
#    at start, not per scrape, and its profile would double the file.
# Run it after changes to the scrape path; a stale profile still builds,
# it only optimises the changed functions as if there were no profile.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rustup component add llvm-tools >/dev/null
profdata=$(find "$(rustc --print sysroot)" -name llvm-profdata -type f | head -1)
[ -x "$profdata" ] || { echo "pgo-profile: llvm-profdata not found in the toolchain" >&2; exit 1; }

echo "pgo-profile: instrumented build"
RUSTFLAGS="-Cprofile-generate=$work/raw" \
  cargo build --release --locked -q -p usescope --target-dir "$work/target"

echo "pgo-profile: training"
# The client of bench/defaults.py: Prometheus's own request headers, or none.
LLVM_PROFILE_FILE="$work/raw/usescope-%p.profraw" python3 - "$work/target/release/usescope" "$work/pid" <<'EOF'
import signal, sys

sys.path.insert(0, "bench")
import defaults

port = defaults.free_port()
daemon, conn = defaults.start([sys.argv[1], f"--web.listen-address=127.0.0.1:{port}"], port)
with open(sys.argv[2], "w") as f:
    f.write(str(daemon.pid))
for i in range(600):
    defaults.HEADERS = defaults.PROMETHEUS_HEADERS if i % 3 else {}
    defaults.scrape(conn)
daemon.send_signal(signal.SIGTERM)
if daemon.wait(timeout=30) != 0:
    sys.exit("pgo-profile: the daemon did not exit cleanly, so no profile was written")
EOF

mkdir -p exporter/pgo
"$profdata" merge --sparse -o "$root/exporter/pgo/usescope.profdata" "$work/raw/usescope-$(cat "$work/pid").profraw"
echo "pgo-profile: wrote exporter/pgo/usescope.profdata ($(wc -c <exporter/pgo/usescope.profdata) bytes)"
