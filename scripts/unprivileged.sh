#!/usr/bin/env bash
# Runs the sandbox tests and the run CLI tests as an unprivileged user (issue 13): the
# supervisor also runs as an ordinary user, where the user namespace is unprivileged, the child
# keeps the user's uid (the identity layer says why) and RLIMIT_NPROC is the process cap.
#   scripts/unprivileged.sh [TEST_NAME...]     (default: the list below)
# A test name is a CTest name (the test file's name, e.g. sandbox_launch_test); the build's
# tests/test-index.tsv says which grouped binary runs it with which doctest filter.
# As root it drops to uid/gid 65534 (SUBAGENT_UNPRIVILEGED_UID to choose another) with setpriv;
# as a normal user it runs the tests as that user. Test cases that need root say so with a doctest
# MESSAGE and skip only themselves. Exits non-zero when any test fails or cannot run.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${SUBAGENT_BUILD_DIR:-$here/build}
id=${SUBAGENT_UNPRIVILEGED_UID:-65534}
index=$build_dir/tests/test-index.tsv

tests=("$@")
if ((${#tests[@]} == 0)); then
  tests=(sandbox_launch_test sandbox_landlock_test sandbox_seccomp_test sandbox_rlimits_test
         sandbox_protect_test sandbox_policy_test sandbox_hostile_test sandbox_rootfs_test
         run_cli_test sandbox_cli_test)
fi

work=$(mktemp -d /tmp/subagent-unprivileged-XXXXXX)
trap 'rm -rf "$work"' EXIT
drop=()
if [ "$(id -u)" -eq 0 ]; then
  chown "$id:$id" "$work"
  drop=(setpriv --reuid="$id" --regid="$id" --clear-groups --inh-caps=-all --)
  who="uid $id"
else
  who="uid $(id -u) (already unprivileged)"
fi
if [ ! -f "$index" ]; then
  echo "unprivileged.sh: $index is missing: configure and build $build_dir first" >&2
  exit 1
fi
# The tests find their programs and policies by absolute path: every directory on the way must
# let that user through.
for p in "$build_dir/bin/subagent-supervisor" "$here/policies/worker.json"; do
  if ! "${drop[@]}" test -r "$p"; then
    echo "unprivileged.sh: $who cannot reach $p; the checkout and build directory must be" \
         "readable and searchable by others to run the suite unprivileged" >&2
    exit 1
  fi
done

echo "unprivileged.sh: running ${#tests[@]} tests as $who" >&2
failed=()
for t in "${tests[@]}"; do
  bin= filter=
  IFS=$'\t' read -r _ bin filter < <(awk -F'\t' -v t="$t" '$1 == t' "$index") || true
  if [ -z "$bin" ]; then
    echo "unprivileged.sh: $t is not a test of this build (see $index)" >&2
    failed+=("$t")
    continue
  fi
  if [ ! -x "$bin" ]; then
    echo "unprivileged.sh: $t: $bin is not built" >&2
    failed+=("$t")
    continue
  fi
  mkdir -p "$work/$t"
  if [ "$(id -u)" -eq 0 ]; then chown "$id:$id" "$work/$t"; fi
  echo "== $t as $who" >&2
  if ! (cd "$work/$t" && "${drop[@]}" env -i PATH=/usr/bin:/bin LANG=C.UTF-8 HOME="$work/$t" \
          TMPDIR="$work/$t" XDG_STATE_HOME="$work/$t/state" "$bin" "$filter"); then
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "unprivileged.sh: failed as $who: ${failed[*]}" >&2
  exit 1
fi
echo "unprivileged.sh: all ${#tests[@]} tests passed as $who" >&2
