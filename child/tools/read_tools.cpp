// read_file and list_dir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "common.hpp"

namespace child::tools_detail {

namespace {

constexpr std::size_t kBinarySample = 8192;
constexpr std::size_t kChunk = 1 << 20;
// Past this many bytes read_file stops counting lines for the "of N lines" header.
constexpr std::uint64_t kCountLimit = 256ull << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

ssize_t read_some(int fd, char* buf, std::size_t n) {
  for (;;) {
    ssize_t r = ::read(fd, buf, n);
    if (r >= 0 || errno != EINTR) return r;
  }
}

// Fills buf as far as possible; returns bytes read or -1.
ssize_t read_full(int fd, char* buf, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = read_some(fd, buf + got, n - got);
    if (r < 0) return -1;
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

std::string pad_number(std::uint64_t n, int width) {
  std::string s = std::to_string(n);
  if (static_cast<int>(s.size()) < width) s.insert(0, width - s.size(), ' ');
  return s;
}

}  // namespace

ToolOutput read_file(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  WsPath p = resolve_path(ctx, a.str("path"), "path");
  const std::int64_t kMaxLine = 1'000'000'000'000;
  std::int64_t start = a.integer("start_line", 1, 1, kMaxLine);
  std::optional<std::int64_t> end_arg = a.opt_int("end_line", 1, kMaxLine);
  if (end_arg && *end_arg < start) {
    throw ToolError("argument 'end_line' (" + std::to_string(*end_arg) + ") is before 'start_line' (" +
                    std::to_string(start) + ")");
  }
  std::int64_t max_bytes = a.integer("max_bytes", static_cast<std::int64_t>(ctx.result_cap), 1, std::int64_t{1} << 40);
  std::uint64_t end = end_arg ? static_cast<std::uint64_t>(*end_arg) : UINT64_MAX;

  Fd fd(::open(p.abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (fd.get() < 0) {
    int err = errno;
    if (err == EISDIR) throw ToolError("'" + p.rel + "' is a directory; use list_dir to see it");
    throw ToolError(describe_errno(err, p.rel));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw ToolError(describe_errno(errno, p.rel));
  if (S_ISDIR(st.st_mode)) throw ToolError("'" + p.rel + "' is a directory; use list_dir to see it");
  if (!S_ISREG(st.st_mode)) throw ToolError("'" + p.rel + "' is not a regular file");

  // Text budget for the numbered lines; the header and footer need a little room.
  std::size_t budget = std::min<std::size_t>(static_cast<std::size_t>(max_bytes), ctx.result_cap);
  budget = budget > 256 ? budget - 160 : budget / 2;

  std::unique_ptr<char[]> buf(new char[kChunk]);
  std::string body;
  std::uint64_t line = 1;
  bool line_open = false;       // the current line's number prefix is already in body
  std::size_t line_start = 0;   // where the current line begins in body
  bool stopped = false;         // budget exhausted
  std::uint64_t stop_line = 0;  // first line not (fully) shown
  bool line_cut = false;        // stop_line was shown in part
  bool last_was_newline = true;
  bool first = true;
  std::uint64_t total_read = 0;
  bool counted_all = true;
  const std::uint64_t width_hint = end != UINT64_MAX ? end : static_cast<std::uint64_t>(start) + 999;
  const int width = std::max<int>(4, static_cast<int>(std::to_string(width_hint).size()));

  for (;;) {
    ssize_t n = read_full(fd.get(), buf.get(), kChunk);
    if (n < 0) throw ToolError(describe_errno(errno, p.rel));
    if (n == 0) break;
    std::string_view chunk(buf.get(), static_cast<std::size_t>(n));
    if (first) {
      first = false;
      std::string_view sample = chunk.substr(0, kBinarySample);
      if (const void* z = std::memchr(sample.data(), 0, sample.size())) {
        auto off = static_cast<const char*>(z) - sample.data();
        throw ToolError("'" + p.rel + "' is a binary file (NUL byte at offset " + std::to_string(off) +
                        "); read_file only shows text");
      }
      std::size_t bad = 0;
      bool cut_ok = chunk.size() > kBinarySample || static_cast<std::size_t>(n) == kChunk;
      if (!utf8_valid(sample, &bad, cut_ok)) {
        throw ToolError("'" + p.rel + "' is a binary file (invalid UTF-8 at offset " + std::to_string(bad) +
                        "); read_file only shows text");
      }
    }
    total_read += static_cast<std::uint64_t>(n);
    last_was_newline = chunk.back() == '\n';
    const char* q = chunk.data();
    const char* e = q + chunk.size();
    const bool collecting = !stopped && line <= end;
    if (!collecting) {
      // Only counting lines from here on.
      for (const char* z; (z = static_cast<const char*>(std::memchr(q, '\n', e - q))); q = z + 1) {
        ++line;
      }
    } else {
      while (q < e) {
        const char* nl = static_cast<const char*>(std::memchr(q, '\n', e - q));
        const char* seg_end = nl ? nl : e;
        if (!stopped && line >= static_cast<std::uint64_t>(start) && line <= end) {
          if (!line_open) {
            if (body.size() >= budget) {
              stopped = true;
              stop_line = line;
            } else {
              line_start = body.size();
              body += pad_number(line, width);
              body += '\t';
              line_open = true;
            }
          }
          if (line_open) {
            std::size_t room = budget > body.size() ? budget - body.size() : 0;
            std::size_t len = static_cast<std::size_t>(seg_end - q);
            if (len > room) {
              stopped = true;
              stop_line = line;
              if (line == static_cast<std::uint64_t>(start)) {
                // Only a first line too long for the budget is shown in part.
                body.append(q, utf8_floor(std::string_view(q, len), room));
                body += " [line cut]";
                line_cut = true;
              } else {
                body.resize(line_start);
                line_open = false;
              }
            } else {
              body.append(q, len);
            }
          }
        }
        if (!nl) break;
        if (line_open) {
          body += '\n';
          line_open = false;
        }
        ++line;
        q = nl + 1;
      }
    }
    if (total_read >= kCountLimit && (stopped || line > end)) {
      counted_all = false;
      break;
    }
  }
  if (line_open) body += '\n';

  std::uint64_t total_lines = total_read == 0 ? 0 : (last_was_newline ? line - 1 : line);
  ToolOutput out;
  if (total_read == 0) {
    out.content = "'" + p.rel + "' is empty (0 bytes)";
    return out;
  }
  const std::string of_lines = counted_all ? std::to_string(total_lines) : "at least " + std::to_string(total_lines);
  if (counted_all && static_cast<std::uint64_t>(start) > total_lines) {
    throw ToolError("start_line " + std::to_string(start) + " is past the end of '" + p.rel + "' (" + of_lines +
                    " lines)");
  }
  std::uint64_t last_shown = std::min<std::uint64_t>(end, total_lines);
  if (stopped) last_shown = line_cut ? stop_line : stop_line - 1;
  std::string header = p.rel + " (" + of_lines + " lines, " + format_size(st.st_size) + ")";
  if (start != 1 || last_shown != total_lines) {
    header += ", lines " + std::to_string(start) + "-" + std::to_string(last_shown);
  }
  out.content = header + ":\n" + body;
  if (stopped) {
    const std::string limit =
        std::to_string(std::min<std::size_t>(static_cast<std::size_t>(max_bytes), ctx.result_cap));
    if (line_cut && stop_line == static_cast<std::uint64_t>(start)) {
      out.content += "[line " + std::to_string(stop_line) + " is longer than the output limit of " + limit +
                     " bytes and was cut]\n";
    } else {
      out.content += "[stopped at line " + std::to_string(stop_line) + ": output limit of " + limit +
                     " bytes reached; continue with start_line=" + std::to_string(stop_line) + "]\n";
    }
  }
  return out;
}

ToolOutput list_dir(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  WsPath p = resolve_path(ctx, a.opt_str("path").value_or("."), "path");
  std::int64_t max_entries = a.integer("max_entries", 200, 1, 100000);
  Fd fd(open_dir_or_throw(p));
  std::vector<DirEntry> entries;
  if (int err = read_dir_sorted(fd.get(), entries)) throw ToolError(describe_errno(err, p.rel));

  std::string out_text = (p.rel == "." ? std::string("./") : p.rel + "/") + " (" + std::to_string(entries.size()) +
                         (entries.size() == 1 ? " entry)" : " entries)") + ":\n";
  std::size_t shown = 0;
  for (const DirEntry& e : entries) {
    if (shown == static_cast<std::size_t>(max_entries)) break;
    ++shown;
    switch (e.type) {
      case EntryType::dir:
        out_text += e.name + "/\n";
        break;
      case EntryType::file: {
        struct stat st;
        if (::fstatat(fd.get(), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
          out_text += e.name + "  " + format_size(static_cast<std::uint64_t>(st.st_size)) + "\n";
        } else {
          out_text += e.name + "\n";
        }
        break;
      }
      case EntryType::symlink: {
        char target[4096];
        ssize_t n = ::readlinkat(fd.get(), e.name.c_str(), target, sizeof target - 1);
        struct stat st;
        bool is_dir = ::fstatat(fd.get(), e.name.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode);
        out_text += e.name + (is_dir ? "/" : "") + " -> " +
                    (n >= 0 ? std::string(target, static_cast<std::size_t>(n)) : "?") + "\n";
        break;
      }
      case EntryType::other:
        out_text += e.name + "  (special file)\n";
        break;
    }
  }
  if (entries.empty()) out_text += "(empty directory)\n";
  if (shown < entries.size()) {
    out_text +=
        "... " + std::to_string(entries.size() - shown) + " more (max_entries=" + std::to_string(max_entries) + ")\n";
  }
  ToolOutput out;
  out.content = std::move(out_text);
  return out;
}

}  // namespace child::tools_detail
