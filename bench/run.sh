#!/bin/sh
# The benchmark suite (issue 8): builds the project's benchmark targets, runs them, prints one table
# and writes bench/results/*.json.
#   bench/run.sh [BUILD_DIR] [-- subagent_bench options, e.g. --quick or --only spawn,broker]
# Installs Debian's bubblewrap and ripgrep first when they are missing (needs root and apt-get).
# Takes about 5-8 minutes on a 2-CPU machine once built.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-"$root/build-bench"}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

missing=""
command -v bwrap >/dev/null 2>&1 || missing="$missing bubblewrap"
command -v rg >/dev/null 2>&1 || missing="$missing ripgrep"
if [ -n "$missing" ]; then
  echo "bench: installing$missing" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y $missing >/dev/null
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" --target subagent_bench spawn_bench

mkdir -p "$here/results"
echo "bench: $(nproc) CPUs, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$build/bin/spawn_bench" --iterations 150 --warmup 10 --json "$here/results/spawn.json"
echo "bench: spawn_bench done, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo
"$build/bin/subagent_bench" --results "$here/results" "$@"
