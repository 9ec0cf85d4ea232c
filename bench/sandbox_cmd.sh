#!/bin/sh
# Whole-process start-up of `subagent-supervisor sandbox --preset explore -- /bin/true` against
# bwrap's nearest equivalent (issues 19 and 34): wall time of each command from fork to reap and the
# CPU of its whole process tree (user + system, as wait4 reports it), the variants
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
python3 - "$n" "$ws" "$@" <<'EOF'
import atexit, os, statistics, subprocess, sys, time

n, ws, sups = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
         "--proc", "/proc", "--dev", "/dev", "/bin/true"]
variants = [("bwrap", bwrap)] + [(s, [s, "sandbox", "--preset", "explore", "--workspace", ws, "--", "/bin/true"])
                                 for s in sups]

def load():
    with open("/proc/loadavg") as f:
        return f.read().strip()

# CPU of the whole process tree. wait4's rusage counts only the descendants that were reaped up
# the chain, and bwrap's outer process exits once its pid 1 has reported the status, before that
# pid 1 is reaped: bwrap's pid 1 and the command it ran are never counted there (strace -f shows
# the outer exit_group before the inner one). A cpuacct cgroup (cgroup v1, as root) per run counts
# every task that ran in it, reaped or not; the supervisor moves its child into the cpu, memory and
# pids hierarchies only, so its whole tree stays in this one.
ACCT = "/sys/fs/cgroup/cpuacct"
acct = None
if os.geteuid() == 0 and os.path.isfile(os.path.join(ACCT, "cpuacct.usage")):
    acct = os.path.join(ACCT, "subagent-sandbox-cmd-%d" % os.getpid())
    os.mkdir(acct)

    def remove_acct():  # also after a failed run (sys.exit): once what ran in it has exited
        for _ in range(5000):
            if not open(os.path.join(acct, "cgroup.procs")).read().strip():
                break
            time.sleep(0.001)
        try:
            os.rmdir(acct)
        except OSError as e:
            print("sandbox_cmd.sh: could not remove %s: %s" % (acct, e), file=sys.stderr)
    atexit.register(remove_acct)
print("CPU: " + ("a cpuacct cgroup per run (every task of the tree)" if acct else
                 "wait4's rusage (no cpuacct cgroup here: bwrap's pid 1 and its command are NOT counted)"))

def once(cmd, in_acct):
    # Wall time from fork to reap (a run outside the cgroup: moving a task into one costs the
    # kernel a wait of its own), or the CPU as above.
    def enter():
        with open(os.path.join(acct, "cgroup.procs"), "w") as f:
            f.write("0")
    before = int(open(os.path.join(acct, "cpuacct.usage")).read()) if in_acct else 0
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=enter if in_acct else None)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("%s exited %d: %s" % (" ".join(cmd), p.returncode, err.decode(errors="replace")))
    if not in_acct:
        return dt * 1000, (ru.ru_utime + ru.ru_stime) * 1000
    for _ in range(1000):  # an orphaned pid 1 still exiting
        if not open(os.path.join(acct, "cgroup.procs")).read().strip():
            break
        time.sleep(0.001)
    return dt * 1000, (int(open(os.path.join(acct, "cpuacct.usage")).read()) - before) / 1e6

print("load at start: " + load())
for _, cmd in variants:  # warm the page cache once
    once(cmd, False)
times = {name: [] for name, _ in variants}
cpus = {name: [] for name, _ in variants}
for i in range(n):
    # the order rotates, so that no variant always runs right after the same one
    for name, cmd in variants[i % len(variants):] + variants[:i % len(variants)]:
        wall, cpu = once(cmd, False)
        times[name].append(wall)
        if acct:
            cpu = once(cmd, True)[1]
        cpus[name].append(cpu)
base = statistics.median(times["bwrap"])
base_cpu = statistics.median(cpus["bwrap"])
for name, _ in variants:
    m = statistics.median(times[name])
    c = statistics.median(cpus[name])
    print("%-48s wall median %6.2f ms (min %6.2f, max %6.2f) %.2fx bwrap; CPU median %6.2f ms %.2fx bwrap" %
          (name, m, min(times[name]), max(times[name]), m / base, c, c / base_cpu))
print("load at end:   " + load())
EOF
