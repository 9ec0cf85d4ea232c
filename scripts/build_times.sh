#!/usr/bin/env bash
# Build times of one tree, cold and warm, the way the README's "Tests" table records them.
#   scripts/build_times.sh [--tree DIR] [--out DIR] [-- CMAKE_ARGS...]   (e.g. -- -DSUBAGENT_BENCH=OFF)
# Configures a fresh build directory (RelWithDebInfo, gcc, like `scripts/setup.sh build`) and builds
# everything twice with ccache pointed at an empty cache of its own:
#   cold  the first build: every compilation misses (what a fresh CI machine sees; ccache's miss
#         overhead included, as there)
#   warm  the same build directory cleaned (`ninja clean`) and built again against the cache the
#         cold build filled: every compilation hits; what is left is ccache, the PCH and linking
# Each line gives wall time, CPU time (user + sys of the build and everything it ran) and the load
# average at the start and the end (/proc/loadavg). Figures taken above load 3 on 2 CPUs are not
# comparable: run it on a quiet machine. The user's own ccache is not touched.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$here
out=
extra=()
while (($#)); do
  case "$1" in
    --) shift; extra=("$@"); break ;;
    --tree) tree=$(cd "$2" && pwd); shift ;;
    --out) out=$2; shift ;;
    *) echo "usage: scripts/build_times.sh [--tree DIR] [--out DIR] [-- CMAKE_ARGS...]" >&2; exit 64 ;;
  esac
  shift
done
out=${out:-$(mktemp -d /tmp/subagent-build-times.XXXXXX)}
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 2)
export CCACHE_DIR=$out/ccache CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=20G
rev=$(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo unknown)

load() { cut -d' ' -f1 /proc/loadavg; }

one() {  # label, build dir, [keep: build in the directory as it is]
  local label=$1 dir=$2 l0 l1 t0 t1 c0 c1
  if [ "${3:-}" != keep ]; then
    rm -rf "$dir"
    cmake -S "$tree" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
  fi
  l0=$(load)
  t0=$(date +%s.%N)
  # `times` (run in this shell, not a subshell) prints this shell's and its reaped children's CPU time.
  times >"$dir.times"
  c0=$(awk 'NR==2 { print $1, $2 }' "$dir.times")
  cmake --build "$dir" -j "$jobs" >"$dir.log" 2>&1 || { echo "build failed: $dir.log" >&2; exit 1; }
  times >"$dir.times"
  c1=$(awk 'NR==2 { print $1, $2 }' "$dir.times")
  t1=$(date +%s.%N)
  l1=$(load)
  awk -v label="$label" -v rev="$rev" -v args="${extra[*]}" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" \
    -v l0="$l0" -v l1="$l1" -v jobs="$jobs" '
    function secs(s,  m) { # "1m2.345s" -> seconds
      m = s; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); return m * 60 + s }
    BEGIN {
      split(c0, a, " "); split(c1, b, " ")
      user = secs(b[1]) - secs(a[1]); sys = secs(b[2]) - secs(a[2]); wall = t1 - t0
      printf "%s %s [%s] jobs=%d: wall %dm%02ds (%.0f s), cpu user %.0f s + sys %.0f s, load %s -> %s\n",
        rev, label, args, jobs, int(wall / 60), int(wall % 60), wall, user, sys, l0, l1 }'
}

ccache -z >/dev/null 2>&1 || true
one cold "$out/build"
ccache -s 2>/dev/null | grep -E 'Hits|Misses' | sed 's/^/  ccache: /' || true
ccache -z >/dev/null 2>&1 || true
cmake --build "$out/build" --target clean >/dev/null
one warm "$out/build" keep
ccache -s 2>/dev/null | grep -E 'Hits|Misses' | sed 's/^/  ccache: /' || true
