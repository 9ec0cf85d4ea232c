// The process table as /proc shows it, for tests and test programs that check what is left alive
// (survivors, zombies). No test framework here, so standalone programs (soak_driver) can use it too.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace test {

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  std::string comm;
};

// Every process in /proc (empty only when /proc cannot be read).
inline std::vector<ProcInfo> processes() {
  std::vector<ProcInfo> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 >= line.size()) continue;
    ProcInfo p;
    p.pid = std::atoi(e->d_name);
    p.comm = line.substr(open + 1, close - open - 1);
    p.state = line[close + 2];
    p.ppid = std::atoi(line.c_str() + close + 4);
    out.push_back(p);
  }
  ::closedir(d);
  return out;
}

// Number of live (non-zombie) processes whose comm is `name`; -1 when /proc cannot be read.
inline int processes_named(const std::string& name) {
  const auto all = processes();
  if (all.empty()) return -1;  // this process itself is always there
  int n = 0;
  for (const auto& p : all) n += p.comm == name && p.state != 'Z';
  return n;
}

}  // namespace test
