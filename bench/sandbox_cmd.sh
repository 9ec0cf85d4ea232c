#!/bin/sh
# Whole-process start-up of `subagent-supervisor sandbox --preset explore -- /bin/true` against
# bwrap's nearest equivalent (issue 19): wall time of each command from fork to reap, the variants
# interleaved in one loop so that machine noise hits them alike, medians of N runs (default 30).
# Not a test: nothing here asserts a time. Run it as the user the numbers are for (root here).
#
#   bench/sandbox_cmd.sh [-n N] [SUPERVISOR...]   default SUPERVISOR: build/bin/subagent-supervisor
#
# Several SUPERVISOR binaries are measured side by side (e.g. a saved copy of an older build: give
# it SUBAGENT_POLICY_DIR, or it finds no presets outside its build tree).
set -eu
n=30
if [ "${1:-}" = "-n" ]; then
  n=$2
  shift 2
fi
[ $# -gt 0 ] || set -- "$(dirname "$0")/../build/bin/subagent-supervisor"
command -v bwrap >/dev/null || { echo "sandbox_cmd.sh: bwrap is not installed (apt-get install bubblewrap)" >&2; exit 1; }
: "${SUBAGENT_POLICY_DIR:=$(cd "$(dirname "$0")/../policies" && pwd)}"
export SUBAGENT_POLICY_DIR
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT
exec python3 - "$n" "$ws" "$@" <<'EOF'
import statistics, subprocess, sys, time

n, ws, sups = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
         "--proc", "/proc", "--dev", "/dev", "/bin/true"]
variants = [("bwrap", bwrap)] + [(s, [s, "sandbox", "--preset", "explore", "--workspace", ws, "--", "/bin/true"])
                                 for s in sups]

def load():
    with open("/proc/loadavg") as f:
        return f.read().strip()

def once(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.decode(errors="replace")))
    return dt * 1000

print("load at start: " + load())
for _, cmd in variants:  # warm the page cache once
    once(cmd)
times = {name: [] for name, _ in variants}
for _ in range(n):
    for name, cmd in variants:
        times[name].append(once(cmd))
base = statistics.median(times["bwrap"])
for name, _ in variants:
    m = statistics.median(times[name])
    print("%-60s median %7.2f ms  (min %6.2f, max %6.2f)  %.2fx bwrap" %
          (name, m, min(times[name]), max(times[name]), m / base))
print("load at end:   " + load())
EOF
