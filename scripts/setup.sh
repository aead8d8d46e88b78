#!/usr/bin/env bash
# Installs what usescope needs to build, run and test on a fresh Debian 12
# machine (run as root). Idempotent: apt runs only for missing packages.
#
# Rust >= 1.95 must already be on PATH (rustup's stable): Debian 12's own
# rustc is 1.63, far too old, and no other Rust source is reachable here.
set -euo pipefail

packages=(
  clang llvm libbpf-dev bpftool   # compile the eBPF programs (build.rs)
  gcc libc6-dev                   # link Rust binaries; compile libdeflate (gzip) from its crate
  prometheus prometheus-alertmanager  # promtool, amtool and the real servers the tests start
  docker-compose                  # offline validation of docker-compose.yml
  python3 python3-venv curl openssl ca-certificates util-linux libcap2-bin
  systemd                         # systemd-analyze verify of the unit file
  wrk                             # the load test
  python3-fusepy                  # tests/tools/hangfs.py: a real hung FUSE mount (libfuse2)
  mount                           # losetup: the loop device of the biolatency test (tests/probes.rs)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends: the prometheus package recommends Debian's
  # node_exporter, which we do not want running beside usescope.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust >= 1.95 (rustup) first" >&2; exit 1; }
rustc_minor=$(rustc --version | awk '{split($2, v, "."); print v[2]}')
if [ "${rustc_minor:-0}" -lt 95 ]; then
  echo "setup: rustc $(rustc --version) is older than 1.95" >&2
  exit 1
fi
for comp in rustfmt clippy; do
  if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
    command -v rustup >/dev/null && rustup component add "$comp" >/dev/null 2>&1 || true
  fi
done
# node_exporter, the oracle of the compatibility tests (scripts/compat-node-exporter.sh
# and the compat_* integration tests), built from the Go module proxy.
NODE_EXPORTER_VERSION=v1.12.1
gobin="$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"
if ! "$gobin/node_exporter" --help >/dev/null 2>&1; then
  command -v go >/dev/null || { echo "setup: Go is needed to build node_exporter (the compatibility oracle)" >&2; exit 1; }
  echo "setup: building node_exporter $NODE_EXPORTER_VERSION with go install"
  (cd /tmp && go install "github.com/prometheus/node_exporter@$NODE_EXPORTER_VERSION")
fi

echo "setup: ok ($(rustc --version), $(clang --version | head -1))"
