#include <unistd.h>

#include <filesystem>
#include <utility>

#include "supervisor/cli.hpp"

namespace supervisor::cli {

std::optional<std::string> Args::next() {
  inline_value_.reset();
  if (pos_ >= args_.size()) return std::nullopt;
  std::string a = args_[pos_++];
  if (a.size() > 2 && a.rfind("--", 0) == 0) {
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      inline_value_ = a.substr(eq + 1);
      a.resize(eq);
    }
  }
  return a;
}

std::string Args::value(const std::string& flag) {
  if (inline_value_) return *std::exchange(inline_value_, std::nullopt);
  if (pos_ >= args_.size()) throw UsageError(flag + " needs a value");
  return args_[pos_++];
}

std::uint64_t Args::number(const std::string& flag) {
  std::string v = value(flag);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18)
    throw UsageError(flag + " takes a whole number, not '" + v + "'");
  return std::stoull(v);
}

std::vector<std::string> Args::rest() {
  std::vector<std::string> out(args_.begin() + static_cast<std::ptrdiff_t>(pos_), args_.end());
  pos_ = args_.size();
  return out;
}

std::string executable_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace supervisor::cli
