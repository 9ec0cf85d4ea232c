#!/usr/bin/env bash
# Build times of one tree, cold and warm, the way the README's "Tests" table records them.
#   scripts/build_times.sh [--tree DIR] [--out DIR] [--targets "T..."] [--cold-only] [-- CMAKE_ARGS...]
#   (e.g. -- -DSUBAGENT_BENCH=OFF; --targets "subagent-supervisor subagent-child": what the demo builds)
# Configures a fresh build directory (RelWithDebInfo, gcc, like `scripts/setup.sh build`) and builds
# everything (or the targets given) twice with ccache pointed at an empty cache of its own:
#   cold  the first build: every compilation misses (what a fresh CI machine sees; ccache's miss
#         overhead included, as there)
#   warm  the same build directory cleaned (`ninja clean`) and built again against the cache the
#         cold build filled: every compilation hits; what is left is ccache and linking
# Each line gives wall time, CPU time (user + sys of the build and everything it ran) and the load
# average at the start and the end (/proc/loadavg). Figures taken above load 3 on 2 CPUs are not
# comparable: run it on a quiet machine. The user's own ccache is not touched.
# Where the time goes: every compilation and link runs through this script as the compiler and
# linker launcher, which records its CPU time (user + sys; contention changes it much less than
# wall time) in OUT/cold.tsv and OUT/warm.tsv; the 25 dearest steps and the sum per target follow.
set -euo pipefail

if [ "${1:-}" = --launcher ]; then  # --launcher LOG COMMAND...: run COMMAND, append "cpu\toutput" to LOG
  log=$2
  shift 2
  rc=0
  "$@" || rc=$?
  output=?
  prev=
  for a in "$@"; do
    if [ "$prev" = -o ]; then output=$a; fi
    prev=$a
  done
  t=$(mktemp)
  times >"$t"  # this shell's line, then its children's: "1m2.345s 0m0.678s"
  awk -v o="$output" 'function secs(x,  m) { m = x; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", x); sub(/s$/, "", x); return m * 60 + x }
    NR == 2 { printf "%.2f\t%s\n", secs($1) + secs($2), o }' "$t" >>"$log"
  rm -f "$t"
  exit $rc
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tree=$here
out=
extra=()
targets=()
cold_only=
while (($#)); do
  case "$1" in
    --) shift; extra=("$@"); break ;;
    --tree) tree=$(cd "$2" && pwd); shift ;;
    --out) out=$2; shift ;;
    --targets) read -r -a targets <<<"$2"; shift ;;
    --cold-only) cold_only=1 ;;
    *) echo "usage: scripts/build_times.sh [--tree DIR] [--out DIR] [--targets \"T...\"] [--cold-only] [-- CMAKE_ARGS...]" >&2; exit 64 ;;
  esac
  shift
done
out=${out:-$(mktemp -d /tmp/subagent-build-times.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
self=$here/scripts/build_times.sh
jobs=$(nproc 2>/dev/null || echo 2)
export CCACHE_DIR=$out/ccache CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=20G
rev=$(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo unknown)

load() { cut -d' ' -f1 /proc/loadavg; }

one() {  # label, build dir, [keep: build in the directory as it is]
  local label=$1 dir=$2 l0 l1 t0 t1 c0 c1
  if [ "${3:-}" != keep ]; then
    rm -rf "$dir"
    cmake -S "$tree" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_COMPILER_LAUNCHER=$self;--launcher;$out/steps.tsv;ccache" \
      "-DCMAKE_CXX_LINKER_LAUNCHER=$self;--launcher;$out/steps.tsv" "${extra[@]}" >/dev/null
  fi
  : >"$out/steps.tsv"
  l0=$(load)
  t0=$(date +%s.%N)
  # `times` (run in this shell, not a subshell) prints this shell's and its reaped children's CPU time.
  times >"$dir.times"
  c0=$(awk 'NR==2 { print $1, $2 }' "$dir.times")
  cmake --build "$dir" -j "$jobs" ${targets[@]:+--target "${targets[@]}"} >"$dir.log" 2>&1 ||
    { echo "build failed: $dir.log" >&2; exit 1; }
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
  mv "$out/steps.tsv" "$out/$label.tsv"
  steps "$out/$label.tsv"
}

steps() {  # the launcher's records: the dearest steps, then CPU seconds per target
  sort -rn "$1" | head -n 25 | awk -F'\t' '{ printf "  %7.2f s  %s\n", $1, $2 }'
  awk -F'\t' '{ t = $2; if (t ~ /CMakeFiles\//) { sub(/.*CMakeFiles\//, "", t); sub(/\.dir\/.*/, "", t) } else t = "link " t
    cpu[t] += $1; n[t]++ }
    END { for (t in cpu) printf "  %7.1f s  %3d steps  %s\n", cpu[t], n[t], t }' "$1" | sort -rn
  awk -F'\t' '{ all += $1 } END { printf "  %7.1f s  %3d steps  all\n", all, NR }' "$1"
}

ccache -z >/dev/null 2>&1 || true
one cold "$out/build"
ccache -s 2>/dev/null | grep -E 'Hits|Misses' | sed 's/^/  ccache: /' || true
[ -z "$cold_only" ] || exit 0
ccache -z >/dev/null 2>&1 || true
cmake --build "$out/build" --target clean >/dev/null
one warm "$out/build" keep
ccache -s 2>/dev/null | grep -E 'Hits|Misses' | sed 's/^/  ccache: /' || true
