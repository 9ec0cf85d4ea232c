#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine: installs what is missing, builds, then runs one of
#   demo    the README's demo: a real explore child reads and greps this repository and reports.
#           Installs only what the programs and their build need and builds only the two programs
#           the demo runs (subagent-supervisor with its core, subagent-child)
#   test    the format check (scripts/format.sh --check, clang-format 14), the whole test suite (CTest), the sandbox and run CLI tests again as an unprivileged
#           user (scripts/unprivileged.sh), then the sanitizer builds and short fuzz runs
#           (scripts/sanitize.sh, scripts/fuzz.sh). Installs the rest (Node.js and npm for the MCP
#           SDK tests, clang-16 and its sanitizer runtime for the sanitizer builds) and builds everything
#   test-quick  the test suite only (installs and builds as `test` does)
#   build   just the build, of everything (the programs' packages only)
# All of them share one build directory ($SUBAGENT_BUILD_DIR, build/): `test` after `demo` builds
# only what the demo did not. As root it uses apt-get directly; as a normal user it asks sudo for the
# install step only.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
action=${1:-build}
build_dir=${SUBAGENT_BUILD_DIR:-$here/build}

case "$action" in
  build | demo | test | test-quick) ;;
  *)
    echo "usage: scripts/setup.sh [build|demo|test|test-quick]" >&2
    exit 64
    ;;
esac

# What the programs and their build need (doctest-dev: a header the configure step looks for).
packages=(
  g++ cmake ninja-build pkg-config ccache git
  libboost1.81-dev nlohmann-json3-dev libseccomp-dev libcurl4-openssl-dev libssl-dev
  doctest-dev libre2-dev libgumbo-dev
)
# What only the tests need: Node.js for the MCP SDK tests, clang-16 and its sanitizer runtime
# (llvm-16 for the symbolizer) for scripts/sanitize.sh and scripts/fuzz.sh, clang-format-14 for the
# format check.
if [[ $action == test* ]]; then
  packages+=(nodejs clang-16 libclang-rt-16-dev llvm-16 clang-format-14)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's own nodejs comes without npm (NodeSource's includes it); the MCP tests need npm once.
if [[ $action == test* ]] && ! command -v npm >/dev/null; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends npm
fi

jobs=$(nproc 2>/dev/null || echo 2)
# Configured again when packages were installed: the tests' configure step looks for node.
# SUBAGENT_UNITY: each library compiled as one unit, about half the compile CPU of one unit per file
# (bench/README.md, "Build time").
if [ ! -f "$build_dir/build.ninja" ] || ((${#missing[@]})); then
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSUBAGENT_UNITY=ON
fi
if [ "$action" = demo ]; then
  # The lean program depends on its core; the seccomp table they link is generated on the way.
  cmake --build "$build_dir" -j "$jobs" --target subagent-supervisor subagent-child
else
  cmake --build "$build_dir" -j "$jobs"
fi

# The MCP tests drive `subagent-supervisor mcp` with the official MCP TypeScript SDK, at the version
# tests/mcp/package-lock.json pins.
mcp_tests="$here/tests/mcp"
if [[ $action == test* ]] && { [ ! -f "$mcp_tests/node_modules/.package-lock.json" ] ||
    [ "$mcp_tests/package-lock.json" -nt "$mcp_tests/node_modules/.package-lock.json" ]; }; then
  npm ci --prefix "$mcp_tests" --no-audit --no-fund --loglevel=error
fi

case "$action" in
  build) ;;
  demo)
    exec "$build_dir/bin/subagent-supervisor" run \
      --preset explore --workspace "$here" \
      --description "demo: map the protocol module" \
      --brief "Find where the supervisor-child protocol framing is implemented and how oversize lines are handled. Cite files and lines." \
      --model "replay:$here/examples/explore-demo.jsonl"
    ;;
  test)
    "$here/scripts/format.sh" --check
    ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600
    SUBAGENT_BUILD_DIR="$build_dir" "$here/scripts/unprivileged.sh"
    "$here/scripts/sanitize.sh" all
    exec "$here/scripts/fuzz.sh"
    ;;
  test-quick)
    exec ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600
    ;;
esac
