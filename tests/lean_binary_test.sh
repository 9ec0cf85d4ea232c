#!/bin/sh
# The lean bin/subagent-supervisor (supervisor/cli/main.cpp with SUBAGENT_LEAN_MAIN) loads none of
# the libraries only the other commands need: its dynamic section names no libcurl, gumbo, RE2 or
# Boost library, and linked static-pie it holds none of their code, nor libcrypto's (the sandbox
# command loads its preset without the digest). The core names libcurl (so the check below can see one), and every command still
# runs through the lean one.   lean_binary_test.sh BUILD_DIR
set -u
bin=$1/bin
failures=0
fail() {
  echo "lean_binary_test: $*" >&2
  failures=$((failures + 1))
}
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

lean=$(needed "$bin/subagent-supervisor") || fail "readelf -d $bin/subagent-supervisor failed"
echo "$lean" | grep -E 'libcurl|libgumbo|libre2|libboost|libnghttp|libssh|libidn|libldap' &&
  fail "bin/subagent-supervisor needs the libraries above, which the sandbox command does not use"
# Linked static-pie (SUBAGENT_STATIC_LEAN) it names no library at all: then its symbol table must
# hold none of those libraries' code either.
if [ -z "$lean" ] && nm "$bin/subagent-supervisor" >/dev/null 2>&1; then
  nm "$bin/subagent-supervisor" | grep -E ' [TtWw] (curl_|gumbo_|_ZN3re2|_ZN5boost4asio|EVP_|OPENSSL_init)' |
    head -3 | grep . &&
    fail "the static bin/subagent-supervisor holds the code above, which the sandbox command does not use"
  nm "$bin/subagent-supervisor-core" | grep -q ' [TtWwU] curl_easy_init' ||
    fail "bin/subagent-supervisor-core has no curl_easy_init symbol: the check above would not see one either"
  nm "$bin/subagent-supervisor-core" | grep -qE ' [TtWwU] EVP_Digest(@|$)' ||
    fail "bin/subagent-supervisor-core has no EVP_Digest symbol (the preset digest): the check above would not see one either"
fi

needed "$bin/subagent-supervisor-core" | grep -q libcurl ||
  fail "bin/subagent-supervisor-core does not name libcurl: this check would not see it either"

# The commands the lean one runs itself, and one the core runs after the exec.
"$bin/subagent-supervisor" version | grep -q '^subagent-supervisor ' || fail "version"
[ "$("$bin/subagent-supervisor" version)" = "$("$bin/subagent-supervisor-core" version)" ] ||
  fail "the lean program and the core report different versions"
"$bin/subagent-supervisor" policy --help >/dev/null || fail "policy --help through the core"
"$bin/subagent-supervisor" policy list | grep -q explore || fail "policy list through the core"
# Unknown commands are the lean one's to refuse (64), with no core involved.
"$bin/subagent-supervisor" no-such-command 2>/dev/null
[ $? -eq 64 ] || fail "an unknown command does not exit 64"

# Copied alone, without its core: sandbox and version still run; the rest exits 125 naming the place.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/bin" "$dir/ws"
cp "$bin/subagent-supervisor" "$dir/bin/"
"$dir/bin/subagent-supervisor" version >/dev/null || fail "version without the core"
"$dir/bin/subagent-supervisor" sandbox --help >/dev/null || fail "sandbox --help without the core"
"$dir/bin/subagent-supervisor" policy --help >"$dir/out" 2>"$dir/err"
status=$?
[ $status -eq 125 ] || fail "policy --help without the core exited $status, expected 125"
grep -qF "$dir/libexec/subagent-supervisor/subagent-supervisor-core (missing)" "$dir/err" ||
  fail "the error does not name where the core was looked for: $(cat "$dir/err")"
[ -s "$dir/out" ] && fail "policy --help without the core printed on stdout"
[ "$failures" -eq 0 ] && echo "lean_binary_test: ok"
[ "$failures" -eq 0 ]
