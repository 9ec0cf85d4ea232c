#!/usr/bin/env bash
# clang-format (.clang-format at the root) over the project's C and C++ sources.
#   scripts/format.sh            rewrite the files in place
#   scripts/format.sh --check    change nothing; list the files that differ and exit 1 if any does
#   scripts/format.sh [--check] FILE...   only these files
# Pinned to clang-format 14 (Debian 12's clang-format-14, 14.0.6): another version breaks some lines
# differently, so the check would fail on a tree formatted correctly. setup.sh test installs it and
# runs --check before building.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
clang_format=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$clang_format" >/dev/null; then
  echo "format.sh: $clang_format is not installed (apt-get install clang-format-14)" >&2
  exit 1
fi
if ! "$clang_format" --version | grep -q 'version 14\.'; then
  echo "format.sh: $clang_format is not clang-format 14: $("$clang_format" --version)" >&2
  exit 1
fi

files=("$@")
if ((${#files[@]} == 0)); then
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c')
fi

if ((check == 0)); then
  "$clang_format" -i --style=file "${files[@]}"
  exit 0
fi
differ=()
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file "$f" | cmp -s - "$f"; then
    differ+=("$f")
  fi
done
if ((${#differ[@]})); then
  printf 'format.sh: not formatted: %s\n' "${differ[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted as .clang-format says" >&2
