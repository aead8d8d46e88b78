#!/usr/bin/env bash
# Runs every libFuzzer target for a share of TOTAL seconds (default 900) and
# prints a markdown results table (also written to target/fuzz-results.md).
# The parsers with the most state (stat, zoneinfo, interrupts, netstat,
# diskstats) get twice the time of the others.
#
# The text targets are the collector registry's parsers, all served by the
# one `parser` binary (USESCOPE_FUZZ_TARGET picks the parser): the list and
# each target's seed files come from the binary itself, so a newly
# registered collector is fuzzed here without an edit. Its seeds are the
# fixture files of the sources it reads, copied to target/seeds/TARGET.
#
# Works on stable Rust: `-s none` builds without a sanitizer, so cargo-fuzz
# passes no -Z flag; coverage comes from the stable -Cpasses=sancov-module.
# A Rust panic still aborts the process, which libFuzzer reports as a crash
# and saves under fuzz/artifacts/TARGET/.
#
# usage: fuzz/run-all.sh [TOTAL_SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"

total=${1:-900}
shift || true
cargo fuzz build -s none >/dev/null
bin=target/$(rustc -vV | sed -n 's/^host: //p')/release
# One line per text target: NAME SEED... (paths under exporter/tests/fixtures,
# starting with the tree: proc/, large/, sys/, rootfs/).
listing=$(USESCOPE_FUZZ_TARGET=list "$bin/parser" 2>/dev/null)
all="$(cut -d' ' -f1 <<<"$listing") btf"
targets=${*:-$all}
heavy=" stat zoneinfo interrupts netstat diskstats "

weight() { [[ $heavy == *" $1 "* ]] && echo 2 || echo 1; }
units=0
for t in $targets; do units=$((units + $(weight "$t"))); done

# Seeds of each text target from both fixture trees, named as in corpus/.
fixtures=../exporter/tests/fixtures
seeds_of() {
  local dir=target/seeds/$1 seed tree rest
  rm -rf "$dir" && mkdir -p "$dir"
  for seed in $(grep "^$1 " <<<"$listing" | cut -d' ' -f2-); do
    tree=${seed%%/*} rest=${seed#*/}
    if [ -f "$fixtures/$seed" ]; then
      cp "$fixtures/$seed" "$dir/seed-$tree-${rest//\//_}"
    fi
  done
  echo "$dir"
}

logs=target/fuzz-logs
mkdir -p "$logs"
out=target/fuzz-results.md
{
  echo "| target | seconds | execs | execs/s | coverage (cov/ft) | corpus | slowest input (s) | crashes |"
  echo "|---|---:|---:|---:|---|---:|---:|---:|"
} >"$out"

failed=0
for t in $targets; do
  secs=$((total * $(weight "$t") / units))
  # New inputs go to a scratch dir listed first, so the committed seed
  # corpus (fuzz/corpus/T) is only read.
  work=target/work/$t
  mkdir -p "$work" "artifacts/$t"
  mkdir -p "corpus/$t"
  if [ "$t" = btf ]; then
    run=(cargo fuzz run -s none btf "$work" "corpus/$t")
  else
    run=(env "USESCOPE_FUZZ_TARGET=$t" cargo fuzz run -s none parser "$work" "corpus/$t" "$(seeds_of "$t")")
  fi
  rc=0
  "${run[@]}" -- -artifact_prefix="$PWD/artifacts/$t/" \
    -max_total_time="$secs" -max_len=65536 -timeout=5 -print_final_stats=1 \
    >"$logs/$t.log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$t.log")
  slowest=$(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$logs/$t.log")
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$logs/$t.log" | tail -1)
  crashes=$(find "artifacts/$t" -type f | wc -l)
  if ((rc != 0)); then
    failed=1
    echo "FAIL $t (exit $rc), see fuzz/$logs/$t.log and fuzz/artifacts/$t/" >&2
  fi
  corp=${cov##*corp: }
  echo "| $t | $secs | ${execs:-?} | ${rate:-?} | ${cov% corp*} | ${corp:-?} | ${slowest:-?} | $crashes |" >>"$out"
  echo "done $t: ${execs:-?} execs in ${secs}s, exit $rc" >&2
done
cat "$out"
exit $failed
