// Compiled into every program of a sanitizer build (-DSUBAGENT_SANITIZE=ON or -DSUBAGENT_TSAN=ON;
// see the top-level CMakeLists.txt), never into a normal build.
//
// LeakSanitizer checks at exit by stopping the world: it lists /proc/<pid>/task and ptrace-attaches
// to each thread. Inside the sandbox seccomp refuses ptrace and the PID namespace makes <pid> name
// another process, so every sanitized child would end with "LeakSanitizer has encountered a fatal
// error" and a failing exit status instead of a leak report. A process under a seccomp filter
// therefore skips the leak check; everything else ASan checks stays on. scripts/sanitize.sh warns when
// the test runner itself is under seccomp (a container), where this would also switch off the leak
// checks of the tests and the supervisor.
#include <sys/prctl.h>

extern "C" int __lsan_is_turned_off() { return ::prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0; }
