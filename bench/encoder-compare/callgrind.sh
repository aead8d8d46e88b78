#!/usr/bin/env bash
# Instructions per scrape for each encoder variant, from callgrind (exact
# and repeatable on a noisy shared machine, unlike wall time): each variant
# runs LOW and HIGH times under callgrind, and the difference in
# instructions divided by HIGH-LOW is one scrape's cost without the set-up.
#   bench/encoder-compare/callgrind.sh [--live]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p encoder-compare
bin=target/release/encoder-compare
low=20 high=220
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
instructions() { # variant runs
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" "$bin" loop "$1" "$2" "${@:3}" >/dev/null 2>"$out/log"
  sed -n 's/^summary: //p' "$out/cg"
}
printf '%-17s %14s\n' variant "instructions/scrape"
for v in own-text own-openmetrics pc-plain pc-guarded collect; do
  a=$(instructions "$v" "$low" "$@")
  b=$(instructions "$v" "$high" "$@")
  printf '%-17s %14d\n' "$v" $(((b - a) / (high - low)))
done
