#!/bin/sh
# Soak (issue 9, part 5): one `subagent-supervisor serve`, N children (default 1,000), 8 at a time, a mix
# of good children, hostile ones, a model server that is down and random cancels. Afterwards: zero
# zombies, zero surviving processes, zero leaked fds, resident memory flat within 10%. Not part of the
# default test run; `ctest -R soak_test` runs a shortened version (60 children).
#
#   ./scripts/soak.sh                     # build what it needs, then run 1,000 children
#   ./scripts/soak.sh --children 200      # any soak_driver option: --children --concurrency --warmup --seed
#   SUBAGENT_BUILD_DIR=/path/to/build ./scripts/soak.sh   (as scripts/setup.sh; BUILD_DIR works too)
#
# Prints the report (JSON) on stdout and a one-line summary on stderr; exits 0 when every check passed.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-${SUBAGENT_BUILD_DIR:-"$ROOT/build"}}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD_DIR" --target subagent-supervisor subagent-child fake_child soak_driver >&2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/subagent-soak-XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
"$BUILD_DIR/tests/programs/soak_driver" --supervisor "$BUILD_DIR/bin/subagent-supervisor" \
  --fake-child "$BUILD_DIR/tests/programs/fake_child" --policy-dir "$ROOT/policies" --work "$WORK" --children 1000 "$@"
