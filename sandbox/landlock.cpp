#include "landlock.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "sandbox/launch.hpp"
#include "syscalls.hpp"

namespace sandbox {
namespace {

using namespace sys;

std::uint64_t handled_fs(int abi) {
  std::uint64_t all = kFsExecute | kFsWriteFile | kFsReadFile | kFsReadDir | kFsRemoveDir | kFsRemoveFile |
                      kFsMakeChar | kFsMakeDir | kFsMakeReg | kFsMakeSock | kFsMakeFifo | kFsMakeBlock | kFsMakeSym;
  if (abi >= 2) all |= kFsRefer;
  if (abi >= 3) all |= kFsTruncate;
  if (abi >= 5) all |= kFsIoctlDev;
  return all;
}

constexpr std::uint64_t kFileOnly = kFsExecute | kFsWriteFile | kFsReadFile | kFsTruncate | kFsIoctlDev;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::string& what, int err) {
  throw SandboxError("landlock: " + what + ": " + std::strerror(err));
}

}  // namespace

std::uint64_t landlock_directory_access(int abi, bool read, bool write) {
  if (abi == 0) return 0;
  std::uint64_t access = 0;
  if (read || write) access |= kFsReadFile | kFsReadDir;
  if (write) access |= handled_fs(abi) & ~kFsExecute;
  return access;
}

LandlockRuleset build_landlock(const LandlockPaths& paths, const std::string& workspace) {
  LandlockRuleset out;
  out.abi = landlock_abi();
  if (out.abi == 0) {
    out.detail = "the kernel has no Landlock (or it is disabled by the lsm= boot option)";
    return out;
  }
  const std::uint64_t all = handled_fs(out.abi);
  const std::uint64_t read = kFsReadFile | kFsReadDir;
  const std::uint64_t write = all & ~kFsExecute;
  const std::uint64_t exec = kFsExecute | read;

  // Rights per path, merged: a path listed as read and write gets both.
  std::map<std::string, std::uint64_t> rights;
  for (const auto& p : paths.read) rights[p] |= read;
  for (const auto& p : paths.write) rights[p] |= write;
  for (const auto& p : paths.execute) rights[p] |= exec;

  LandlockRulesetAttr attr{};
  attr.handled_access_fs = all;
  if (out.abi >= 4 && paths.deny_tcp) {
    attr.handled_access_net = kNetBindTcp | kNetConnectTcp;  // no port rules: every TCP port denied
    out.tcp_denied = true;
  }
  if (out.abi >= 6) {
    attr.scoped = kScopeAbstractUnixSocket | kScopeSignal;
    out.scoped = true;
  }
  std::size_t size = out.abi >= 6   ? sizeof(attr)
                     : out.abi >= 4 ? offsetof(LandlockRulesetAttr, scoped)
                                    : offsetof(LandlockRulesetAttr, handled_access_net);
  Fd ruleset{landlock_create_ruleset(&attr, size, 0)};
  if (ruleset.fd < 0) fail("landlock_create_ruleset", errno);
  ::fcntl(ruleset.fd, F_SETFD, FD_CLOEXEC);
  if (ruleset.fd < 3) {  // a caller with 0, 1 or 2 closed: the child's stdio dup3 would replace it
    Fd above{::fcntl(ruleset.fd, F_DUPFD_CLOEXEC, 3)};
    if (above.fd < 0) fail("moving the Landlock ruleset above fd 2", errno);
    std::swap(ruleset.fd, above.fd);
  }

  std::string skipped;
  for (const auto& [path, access] : rights) {
    Fd dir{::open(path.c_str(), O_PATH | O_CLOEXEC)};
    if (dir.fd < 0) {
      int err = errno;
      if (err == ENOENT && path != workspace) {
        skipped += (skipped.empty() ? "" : ", ") + path;
        continue;
      }
      fail("opening rule path '" + path + "'", err);
    }
    struct stat st {};
    if (::fstat(dir.fd, &st) != 0) fail("fstat '" + path + "'", errno);
    LandlockPathBeneathAttr rule{};
    rule.allowed_access = S_ISDIR(st.st_mode) ? access : (access & kFileOnly);
    rule.parent_fd = dir.fd;
    if (landlock_add_rule(ruleset.fd, kLandlockRulePathBeneath, &rule) != 0)
      fail("adding the rule for '" + path + "'", errno);
  }
  out.detail = "ABI " + std::to_string(out.abi) + ", " + std::to_string(rights.size()) + " path rules";
  if (out.tcp_denied) out.detail += ", TCP bind/connect denied";
  if (!skipped.empty()) out.detail += ", skipped missing paths: " + skipped;
  out.fd = ruleset.fd;
  ruleset.fd = -1;
  return out;
}

}  // namespace sandbox
