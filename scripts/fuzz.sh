#!/usr/bin/env bash
# Short libFuzzer runs of every tests/fuzz/*_fuzz.cpp target (called by `scripts/setup.sh test`).
# The targets are built in the ASan build ($SUBAGENT_ASAN_BUILD_DIR, build-asan; clang-16, -DSUBAGENT_FUZZ=ON),
# each runs for $SUBAGENT_FUZZ_SECONDS (60) from the seeds in tests/fuzz/corpus/<name>/. New inputs go
# to <build>/fuzz-corpus/<name>/, never into the source tree; a crashing input is saved as
# <build>/fuzz-artifacts/<name>-crash-* and the script fails naming it.
# Targets run $(nproc) at a time (each is one process on one core), so the whole run takes about
# seconds x ceil(targets / cores) of wall time; each target still gets its full $SUBAGENT_FUZZ_SECONDS.
#   scripts/fuzz.sh [NAME...]    only these targets (e.g. sse control)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${SUBAGENT_ASAN_BUILD_DIR:-$here/build-asan}
seconds=${SUBAGENT_FUZZ_SECONDS:-60}
jobs=$(nproc 2>/dev/null || echo 2)

symbolizer=/usr/lib/llvm-16/bin/llvm-symbolizer
if [ -x "$symbolizer" ]; then export ASAN_SYMBOLIZER_PATH=$symbolizer; fi

if [ ! -f "$dir/build.ninja" ]; then
  # Configured as scripts/sanitize.sh configures it (line tables only, unity units).
  CXX=clang++-16 cmake -S "$here" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSUBAGENT_WERROR=OFF \
    -DSUBAGENT_BENCH=OFF -DSUBAGENT_UNITY=ON '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG' \
    -DSUBAGENT_FUZZ=ON
fi
cmake --build "$dir" -j "$jobs" --target fuzz_targets

names=("$@")
if ((${#names[@]} == 0)); then
  for src in "$here"/tests/fuzz/*_fuzz.cpp; do
    n=${src##*/}
    names+=("${n%_fuzz.cpp}")
  done
fi

fuzz_one() {  # name; exit status: the fuzzer's
  local name=$1 bin=$dir/fuzz/${1}_fuzz seeds=$here/tests/fuzz/corpus/$1 work=$dir/fuzz-corpus/$1
  mkdir -p "$work" "$dir/fuzz-artifacts"
  [ -d "$seeds" ] || seeds=
  echo "fuzz: $name for ${seconds}s" >&2
  # detect_leaks stays on: a leak per input is a bug too. -rss_limit_mb guards the machine, not the code.
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$dir/fuzz-artifacts/$name-" "$work" ${seeds:+"$seeds"} 2>"$dir/fuzz-$name.log"
}

# Each target's verdict is reported when all have run, in the order they were named.
declare -A pid_of status_of
running=0
for name in "${names[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  pid_of[$name]=$!
  running=$((running + 1))
done
for name in "${names[@]}"; do
  if wait "${pid_of[$name]}"; then status_of[$name]=0; else status_of[$name]=1; fi
done

failed=()
for name in "${names[@]}"; do
  if ((status_of[$name])); then
    tail -n 60 "$dir/fuzz-$name.log" >&2
    failed+=("$name")
  else
    echo "fuzz: $name:" >&2
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$dir/fuzz-$name.log" >&2 || true
  fi
done

if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]}; reproducers in $dir/fuzz-artifacts/ (run <target> <file> to replay)" >&2
  exit 1
fi
echo "fuzz: ${#names[@]} targets ran ${seconds}s each without a finding" >&2
