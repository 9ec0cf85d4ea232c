#!/bin/sh
# Builds and runs the spawn benchmark; writes bench/results/spawn.json.
#   bench/run.sh [BUILD_DIR] [-- spawn_bench options]
# Installs Debian's bubblewrap first when it is missing (needs root and apt-get).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-"$root/build-bench"}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

if ! command -v bwrap >/dev/null 2>&1; then
  echo "bench: installing bubblewrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y bubblewrap >/dev/null
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" --target spawn_bench

mkdir -p "$here/results"
echo "bench: $(nproc) CPUs, kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
"$build/bin/spawn_bench" --iterations 300 --warmup 20 --json "$here/results/spawn.json" "$@"
