#!/usr/bin/env bash
# The installed tree works on its own (README.md, Install):
#   tests/install_test.sh BUILD_DIR SOURCE_DIR [CMAKE]
# installs BUILD_DIR into a fresh temporary prefix with `cmake --install`, and from there, with the
# current directory outside the checkout and no --child / --policy-dir / SUBAGENT_POLICY_DIR, runs the
# README's demo (a real sandboxed explore child driven by the installed replay script), `policy
# explain` and `policy check` of the installed presets. The installed tree must hold the two programs
# and no test program, benchmark or fuzzer. A DESTDIR-staged install, moved elsewhere afterwards,
# must work the same (nothing absolute is compiled in).
# Twins: the same binary copied alone into an empty directory, and an installed tree with its presets
# or its child removed, fail with exit 125 and an error naming where they looked and how to fix it;
# they never fall back to the checkout the binary was built from. The copied binary works again when
# given --child and --policy-dir, and the build tree's own binary still finds the checkout's presets.
set -euo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
cmake=${3:-cmake}

work=$(mktemp -d /tmp/subagent-install-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "install_test: FAIL: $*" >&2
  failures=$((failures + 1))
}
note() { echo "install_test: $*" >&2; }

if ! command -v node >/dev/null; then
  echo "install_test: node (Node.js) is needed to read the envelopes: install nodejs (scripts/setup.sh does)" >&2
  exit 1
fi
# Nothing from the environment may lead the installed programs back to the checkout.
unset SUBAGENT_POLICY_DIR
mkdir -p "$work/cwd" "$work/home"
export HOME=$work/home XDG_STATE_HOME=$work/home/state

# expect_status WANT NAME -- COMMAND...: runs COMMAND in $work/cwd, output in $work/NAME.{out,err}.
expect_status() {
  local want=$1 name=$2
  shift 3
  local got=0
  (cd "$work/cwd" && "$@" >"$work/$name.out" 2>"$work/$name.err" </dev/null) || got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$name: exit $got, expected $want: $*"
    sed 's/^/    stderr: /' "$work/$name.err" | tail -n 20 >&2
    return 1
  fi
  return 0
}
# expect_text NAME FILE-SUFFIX TEXT: the output holds TEXT literally.
expect_text() {
  if ! grep -qF -- "$3" "$work/$1.$2"; then
    fail "$1: '$3' not in its std$2"
    sed 's/^/    /' "$work/$1.$2" | tail -n 20 >&2
  fi
}

# demo NAME BIN [FLAGS...]: the README's demo with the installed replay script.
demo() {
  local name=$1 bin=$2
  shift 2
  "$bin" run --preset explore --workspace "$src" "$@" \
    --description "demo: map the protocol module" \
    --brief "Find where the supervisor-child protocol framing is implemented and how oversize lines are handled. Cite files and lines." \
    --model "replay:$replay" --transcript-dir "$work/transcripts-$name"
}

# check_envelope NAME: a completed explore envelope whose tool calls really ran in the sandbox.
check_envelope() {
  local name=$1
  if ! node -e '
    const e = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const want = (c, what) => { if (!c) { console.error(what); process.exit(1); } };
    want(e.status === "completed", "status is " + e.status + ": " + e.reason);
    want(e.preset === "explore", "preset is " + e.preset);
    for (const t of ["list_dir", "grep", "read_file", "glob"])
      want((e.tools_used || {})[t] >= 1, "tool " + t + " was not used: " + JSON.stringify(e.tools_used));
    for (const l of ["seccomp", "landlock"])
      want(e.sandbox.applied.includes(l), "sandbox layer " + l + " not applied: " + JSON.stringify(e.sandbox));
  ' "$work/$name.out"; then
    fail "$name: the envelope is not a completed demo run"
    head -c 2000 "$work/$name.out" >&2
    return
  fi
  # The grep really ran on the checkout (its result is in the transcript), not only the script's text.
  if ! grep -rqF "protocol/framing.cpp" "$work/transcripts-$name" 2>/dev/null ||
     ! grep -rqF "FrameError::line_too_long, discarded_" "$work/transcripts-$name" 2>/dev/null; then
    fail "$name: the transcript holds no result of the child's grep in protocol/"
  fi
}

# ---- 1. cmake --install into a fresh prefix
prefix=$work/prefix
if ! "$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  cat "$work/install.log" >&2
  fail "cmake --install $build --prefix $prefix failed"
  exit 1
fi
sup=$prefix/bin/subagent-supervisor
policies=$prefix/share/subagent-supervisor/policies
doc=$prefix/share/doc/subagent-supervisor
replay=$doc/examples/explore-demo.jsonl
core=$prefix/libexec/subagent-supervisor/subagent-supervisor-core
for f in "$sup" "$core" "$prefix/libexec/subagent-supervisor/subagent-child" "$policies/schema.json" "$policies/README.md" \
         "$doc/README.md" "$doc/policies/README.md" "$doc/protocol/README.md" "$doc/docs/models.md" "$replay"; do
  [ -f "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
# Every preset of the checkout, and nothing else.
diff <(cd "$src/policies" && ls -- *.json) <(cd "$policies" && ls -- *.json) >&2 ||
  fail "the installed presets differ from policies/*.json"

# The programs are the only executables (besides the example child script) and the only ELF files.
(cd "$prefix" && find . -type f -perm /111 | sort) >"$work/executables"
printf '%s\n' ./bin/subagent-supervisor ./libexec/subagent-supervisor/subagent-supervisor-core \
  ./libexec/subagent-supervisor/subagent-child \
  ./share/doc/subagent-supervisor/examples/python_child.py | sort >"$work/executables.want"
diff "$work/executables.want" "$work/executables" >&2 || fail "unexpected executables in the installed tree"
elf=0
while IFS= read -r -d '' f; do
  if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then
    elf=$((elf + 1))
    case $f in
      "$sup" | "$core" | "$prefix/libexec/subagent-supervisor/subagent-child") ;;
      *) fail "an ELF file that is not one of the three programs was installed: ${f#"$prefix"/}" ;;
    esac
  fi
done < <(find "$prefix" -type f -print0)
[ "$elf" -eq 3 ] || fail "expected 3 ELF files in the installed tree, found $elf"
if find "$prefix" \( -name '*_test*' -o -name '*bench*' -o -name '*fuzz*' -o -name 'fake_*' -o -name 'hostile*' \) |
   grep .; then
  fail "test, benchmark or fuzz files were installed (listed above)"
fi

# ---- 2. the demo, policy explain and policy check from the installed binary
if expect_status 0 installed-demo -- demo installed-demo "$sup"; then check_envelope installed-demo; fi
if expect_status 0 installed-explain -- "$sup" policy explain explore; then
  expect_text installed-explain out "preset explore  ($policies/explore.json"
fi
expect_status 0 installed-check -- "$sup" policy check "$policies"/*.json || true
if [ "$(grep -c ': ok$' "$work/installed-check.out")" -ne "$(ls "$policies"/*.json | grep -vc /schema.json)" ]; then
  fail "installed-check: not every installed preset is ok"
  cat "$work/installed-check.out" >&2
fi
expect_text installed-check out "schema.json: skipped"
if expect_status 0 installed-list -- "$sup" policy list; then
  for p in explore reviewer worker implementation research; do expect_text installed-list out "$p"; done
fi

# ---- 3. DESTDIR staging, then the staged tree moved: relocatable
if ! DESTDIR=$work/stage "$cmake" --install "$build" --prefix /opt/subagent-supervisor >"$work/stage.log" 2>&1; then
  cat "$work/stage.log" >&2
  fail "DESTDIR=$work/stage cmake --install --prefix /opt/subagent-supervisor failed"
else
  [ -x "$work/stage/opt/subagent-supervisor/bin/subagent-supervisor" ] || fail "DESTDIR install: no bin/subagent-supervisor"
  moved=$work/moved/elsewhere
  mkdir -p "$work/moved"
  mv "$work/stage/opt/subagent-supervisor" "$moved"
  if expect_status 0 moved-demo -- demo moved-demo "$moved/bin/subagent-supervisor"; then check_envelope moved-demo; fi
  if expect_status 0 moved-explain -- "$moved/bin/subagent-supervisor" policy explain explore; then
    expect_text moved-explain out "($moved/share/subagent-supervisor/policies/explore.json"
  fi

  # Twin: the moved tree without its presets fails and does not fall back to the checkout's.
  mv "$moved/share/subagent-supervisor/policies" "$work/moved/policies"
  if expect_status 125 moved-nopolicies -- "$moved/bin/subagent-supervisor" policy explain explore; then
    expect_text moved-nopolicies err "$moved/share/subagent-supervisor/policies/ (missing)"
    expect_text moved-nopolicies err "--policy-dir"
  fi
  mv "$work/moved/policies" "$moved/share/subagent-supervisor/policies"
  # Twin: without its child it fails at once, though the build tree next door has one.
  mv "$moved/libexec/subagent-supervisor/subagent-child" "$work/moved/subagent-child"
  if expect_status 125 moved-nochild -- demo moved-nochild "$moved/bin/subagent-supervisor"; then
    expect_text moved-nochild err "$moved/libexec/subagent-supervisor/subagent-child (missing)"
    expect_text moved-nochild err "--child PATH"
  fi
  mv "$work/moved/subagent-child" "$moved/libexec/subagent-supervisor/subagent-child"
fi

# ---- 4. twins: a binary copied alone (the installed one, and the build tree's own)
# The lean bin/subagent-supervisor alone runs sandbox and version, and refuses the rest naming where
# it looked for its core.
for from in installed build; do
  lean=$work/lean-$from
  mkdir -p "$lean"
  if [ $from = installed ]; then cp "$sup" "$lean/"; else cp "$build/bin/subagent-supervisor" "$lean/"; fi
  expect_status 0 lean-$from-version -- "$lean/subagent-supervisor" version && expect_text lean-$from-version out "subagent-supervisor "
  expect_status 0 lean-$from-sandbox -- "$lean/subagent-supervisor" sandbox --preset explore --policy-dir "$policies" \
    --workspace "$work/cwd" -- /bin/true || true
  for cmd in "policy --help" "run --preset explore" "mcp"; do
    name=lean-$from-${cmd%% *}
    # shellcheck disable=SC2086
    if expect_status 125 "$name" -- "$lean/subagent-supervisor" $cmd; then
      expect_text "$name" err "no subagent-supervisor-core"
      expect_text "$name" err "$work/libexec/subagent-supervisor/subagent-supervisor-core (missing)"
      expect_text "$name" err "cmake --install"
    fi
  done
done
# The core is the full program: copied alone, it behaves as the one binary did before the split.
for from in installed build; do
  alone=$work/alone-$from
  mkdir -p "$alone"
  if [ $from = installed ]; then cp "$core" "$alone/"; else cp "$build/bin/subagent-supervisor-core" "$alone/"; fi
  a=$alone/subagent-supervisor-core
  if expect_status 125 alone-$from-demo -- demo alone-$from-demo "$a"; then
    for t in "$a looks for the files installed with it" "$work/libexec/subagent-supervisor/subagent-child (missing)" \
             "$work/share/subagent-supervisor/policies/ (missing)" \
             "cmake --install" "--child PATH" "--policy-dir DIR"; do
      expect_text alone-$from-demo err "$t"
    done
    if grep -qF "$alone/subagent-child" "$work/alone-$from-demo.err"; then
      fail "alone-$from-demo: a copied binary looks for a child beside itself (only the build tree's does)"
    fi
    if grep -qF "$src/policies" "$work/alone-$from-demo.err"; then
      fail "alone-$from-demo: a copied binary offers the checkout's policies"
    fi
  fi
  expect_status 125 alone-$from-explain -- "$a" policy explain explore && expect_text alone-$from-explain err "no presets"
  expect_status 125 alone-$from-mcp -- "$a" mcp --policy-dir "$policies" --model "replay:$replay" && expect_text alone-$from-mcp err "no child program"
  # A stray child beside a copied or installed binary is not picked up either.
  cp "$prefix/libexec/subagent-supervisor/subagent-child" "$alone/"
  expect_status 125 alone-$from-stray -- "$a" mcp --policy-dir "$policies" --model "replay:$replay" && expect_text alone-$from-stray err "no child program"
  rm -f "$alone/subagent-child"
  # ... and works when told where its child and presets are.
  if expect_status 0 alone-$from-flags -- demo alone-$from-flags "$a" \
       --child "$prefix/libexec/subagent-supervisor/subagent-child" --policy-dir "$policies"; then
    check_envelope alone-$from-flags
  fi
  SUBAGENT_POLICY_DIR=$policies expect_status 0 alone-$from-env -- "$a" policy explain explore || true
done

# The build tree's own binary still finds the checkout's presets and its child next to it.
if expect_status 0 build-explain -- "$build/bin/subagent-supervisor" policy explain explore; then
  expect_text build-explain out "($src/policies/explore.json"
fi
if expect_status 0 build-demo -- demo build-demo "$build/bin/subagent-supervisor"; then check_envelope build-demo; fi

if [ "$failures" -ne 0 ]; then
  note "$failures failure(s)"
  exit 1
fi
note "installed into $prefix and ran from there: ok"
