#include "common.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace child::tools_detail {

namespace fs = std::filesystem;
using nlohmann::json;

Args::Args(const json& j) : j_(j) {
  if (!j_.is_object() && !j_.is_null()) {
    throw ToolError("arguments must be a JSON object, got " + std::string(j_.type_name()));
  }
}

const json* Args::find(const char* name) const {
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(name);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> Args::opt_str(const char* name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    throw ToolError("argument '" + std::string(name) + "' must be a string, got " + v->type_name());
  }
  return v->get<std::string>();
}

std::string Args::str(const char* name) const {
  auto v = opt_str(name);
  if (!v) throw ToolError("missing required argument '" + std::string(name) + "'");
  return *v;
}

std::optional<std::int64_t> Args::opt_int(const char* name, std::int64_t min, std::int64_t max) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  std::int64_t n = 0;
  bool good = false;
  if (v->is_number_integer()) {
    n = v->get<std::int64_t>();
    good = true;
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    if (d == static_cast<double>(static_cast<std::int64_t>(d))) {
      n = static_cast<std::int64_t>(d);
      good = true;
    }
  } else if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    good = ec == std::errc() && p == s.data() + s.size() && !s.empty();
  }
  if (!good) {
    throw ToolError("argument '" + std::string(name) + "' must be an integer, got " + v->dump());
  }
  if (n < min || n > max) {
    throw ToolError("argument '" + std::string(name) + "' must be between " + std::to_string(min) + " and " +
                    std::to_string(max) + ", got " + std::to_string(n));
  }
  return n;
}

std::int64_t Args::integer(const char* name, std::int64_t def, std::int64_t min, std::int64_t max) const {
  return opt_int(name, min, max).value_or(def);
}

bool Args::boolean(const char* name, bool def) const {
  const json* v = find(name);
  if (!v) return def;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "true") return true;
    if (s == "false") return false;
  }
  throw ToolError("argument '" + std::string(name) + "' must be true or false, got " + v->dump());
}

bool path_inside(const fs::path& root, const fs::path& p) {
  auto r = root.begin();
  auto q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty()) continue;  // trailing separator of root
    if (q == p.end() || *r != *q) return false;
  }
  return true;
}

WsPath resolve_path(const ToolContext& ctx, const std::string& arg, std::string_view argname) {
  if (arg.empty()) throw ToolError("argument '" + std::string(argname) + "' is empty");
  if (arg.find('\0') != std::string::npos) {
    throw ToolError("argument '" + std::string(argname) + "' contains a NUL byte");
  }
  const fs::path& ws = ctx.workspace;
  fs::path p(arg);
  fs::path abs = (p.is_absolute() ? p : ws / p).lexically_normal();
  if (!abs.has_filename() && abs != abs.root_path()) abs = abs.parent_path();
  if (!path_inside(ws, abs)) {
    throw ToolError("path '" + arg + "' is outside the workspace (" + ws.string() +
                    "); use a path relative to the workspace root");
  }
  std::error_code ec;
  fs::path real = fs::weakly_canonical(abs, ec);
  if (!ec && !path_inside(ws, real)) {
    throw ToolError("path '" + arg + "' leads outside the workspace through a symlink (to '" + real.string() + "')");
  }
  return WsPath{abs, relative_to_workspace(ctx, abs)};
}

std::string relative_to_workspace(const ToolContext& ctx, const fs::path& abs) {
  fs::path rel = abs.lexically_relative(ctx.workspace);
  if (rel.empty()) return abs.string();
  return rel.string();
}

std::string describe_errno(int err, std::string_view rel) {
  std::string q = "'" + std::string(rel) + "'";
  switch (err) {
    case ENOENT:
      return q + " does not exist";
    case EACCES:
    case EPERM:
      return "permission denied: " + q;
    case ENOTDIR:
      return q + ": a component of the path is not a directory";
    case EISDIR:
      return q + " is a directory";
    case ELOOP:
      return q + ": too many levels of symbolic links";
    case ENAMETOOLONG:
      return q + ": name too long";
    case EROFS:
      return q + ": read-only file system";
    case ENOSPC:
      return q + ": no space left on device";
    case EFBIG:
      return q + ": file too large";
    default:
      return q + ": " + std::strerror(err);
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if invalid; *cut is set when the sequence is a
// valid prefix that runs past the end of s.
std::size_t utf8_seq(std::string_view s, std::size_t i, bool* cut) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  *cut = false;
  if (c < 0x80) return 1;
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) {
      *cut = true;
      return 0;
    }
    unsigned char d = b(i + k);
    if (k == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
  }
  return len;
}

}  // namespace

bool utf8_valid(std::string_view s, std::size_t* bad_offset, bool allow_cut_tail) {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    bool cut;
    std::size_t n = utf8_seq(s, i, &cut);
    if (n == 0) {
      if (cut && allow_cut_tail) return true;
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += n;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::size_t bad;
  if (utf8_valid(s, &bad)) return std::string(s);
  std::string out(s.substr(0, bad));
  out.reserve(s.size() + 16);
  std::size_t i = bad;
  while (i < s.size()) {
    bool cut;
    std::size_t n = utf8_seq(s, i, &cut);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::size_t utf8_floor(std::string_view s, std::size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

void cap_output(ToolOutput& out, std::size_t cap) {
  out.original_bytes = out.content.size();
  out.content = utf8_sanitize(out.content);
  if (out.content.size() <= cap) return;
  out.truncated = true;
  const std::size_t total = out.original_bytes;
  // The note's length depends on the kept size; its digits never exceed those of the total.
  std::string probe =
      "\n[output truncated: " + std::to_string(total) + " bytes, showing first " + std::to_string(total) + "]";
  if (cap <= probe.size() + 16) {
    out.content.resize(utf8_floor(out.content, cap));
    return;
  }
  std::size_t keep = utf8_floor(out.content, cap - probe.size());
  out.content.resize(keep);
  out.content +=
      "\n[output truncated: " + std::to_string(total) + " bytes, showing first " + std::to_string(keep) + "]";
}

int read_dir_sorted(int dirfd, std::vector<DirEntry>& out) {
  out.clear();
  int fd = ::dup(dirfd);
  if (fd < 0) return errno;
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int err = errno;
    ::close(fd);
    return err;
  }
  ::rewinddir(d);
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
    EntryType t;
    unsigned char dt = e->d_type;
    if (dt == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(dirfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      dt = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_FIFO;
    }
    switch (dt) {
      case DT_REG:
        t = EntryType::file;
        break;
      case DT_DIR:
        t = EntryType::dir;
        break;
      case DT_LNK:
        t = EntryType::symlink;
        break;
      default:
        t = EntryType::other;
        break;
    }
    out.push_back(DirEntry{n, t});
  }
  int err = errno;
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return err;
}

int open_dir_or_throw(const WsPath& p) {
  int fd = ::open(p.abs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOTDIR) throw ToolError("'" + p.rel + "' is a file, not a directory");
    throw ToolError(describe_errno(err, p.rel));
  }
  return fd;
}

bool has_nul(std::string_view s) { return std::memchr(s.data(), 0, s.size()) != nullptr; }

std::string format_size(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

}  // namespace child::tools_detail
