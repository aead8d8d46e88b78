#!/usr/bin/env bash
# Sets up, builds and runs usescope. Run as root so the eBPF probes attach
# (without root they report usescope_probe_up 0 and /proc metrics still work).
# Extra arguments go to usescope, e.g. scripts/run.sh --web.listen-address=127.0.0.1:9200
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
scripts/build-release.sh -q
# As root, drop to nobody once the probes are attached (docs/security.md),
# unless the command line names a --runtime.user of its own.
extra=()
if [ "$(id -u)" = 0 ] && ! printf '%s\n' "$@" | grep -q '^--runtime.user'; then
  extra=(--runtime.user=nobody)
fi
exec target/release/usescope "${extra[@]}" "$@"
