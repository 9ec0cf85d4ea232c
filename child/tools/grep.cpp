// grep: RE2 over the workspace. RE2 runs in linear time, so a model cannot hang the child with a
// pathological pattern. Each file is searched as one buffer (one regex scan finds the next match,
// which is then attributed to its line); only lines with matches are touched one by one.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include <re2/re2.h>

#include "common.hpp"
#include "glob_match.hpp"

namespace child::tools_detail {

namespace {

constexpr std::size_t kBinarySample = 8192;
constexpr std::size_t kMmapThreshold = 16u << 20;
constexpr std::uint64_t kMaxFileSize = 1ull << 30;
constexpr std::size_t kLineDisplay = 300;  // longer lines show a window around the match
constexpr std::size_t kExtraCountLimit = 10000;
constexpr int kMaxDepth = 64;

bool is_plain_literal(const std::string& p) { return p.find_first_of("\\^$.|?*+()[]{}") == std::string::npos; }

// The longest run of bytes every match must contain, found by a conservative scan of the
// pattern's top level (no alternation there, no flag groups, no \Q). Files without it are skipped
// and the regex only runs from lines that contain it, like ripgrep's literal prefilter. Empty when
// nothing safe is found.
std::string required_literal(const std::string& p) {
  if (p.find("(?") != std::string::npos || p.find("\\Q") != std::string::npos) return {};
  std::string best, run;
  bool last_literal = false;
  auto end_run = [&] {
    if (run.size() > best.size()) best = run;
    run.clear();
    last_literal = false;
  };
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '|') return {};
    if (c == '*' || c == '?' || c == '{') {
      if (last_literal && !run.empty()) run.pop_back();  // that character may be absent
      end_run();
    } else if (c == '+') {
      end_run();
    } else if (c == '\\') {
      if (i + 1 >= p.size()) return {};
      char e = p[++i];
      if (std::isalnum(static_cast<unsigned char>(e))) {
        end_run();
      } else {
        run += e;
        last_literal = true;
      }
    } else if (c == '(') {
      int depth = 1;
      for (++i; i < p.size() && depth > 0; ++i) {
        if (p[i] == '\\') {
          ++i;
        } else if (p[i] == '[') {
          std::size_t j = i + 1;
          if (j < p.size() && p[j] == '^') ++j;
          if (j < p.size() && p[j] == ']') ++j;
          while (j < p.size() && p[j] != ']') j += p[j] == '\\' ? 2 : 1;
          i = j;
        } else if (p[i] == '(') {
          ++depth;
        } else if (p[i] == ')') {
          --depth;
        }
      }
      --i;
      end_run();
    } else if (c == '[') {
      std::size_t j = i + 1;
      if (j < p.size() && p[j] == '^') ++j;
      if (j < p.size() && p[j] == ']') ++j;
      while (j < p.size() && p[j] != ']') {
        if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
          std::size_t k = p.find(":]", j + 2);
          j = k == std::string::npos ? p.size() : k + 2;
        } else {
          j += p[j] == '\\' ? 2 : 1;
        }
      }
      i = j;
      end_run();
    } else if (c == '.' || c == '^' || c == '$' || c == ')' || c == ']' || c == '}') {
      end_run();
    } else {
      run += c;
      last_literal = true;
    }
  }
  end_run();
  return best;
}

struct Options {
  std::size_t max_total;
  std::size_t max_per_file;
  std::size_t context;
  std::size_t out_limit;
};

class Grep {
 public:
  Grep(const ToolContext& ctx, const RE2& re, std::optional<std::string> literal, std::string required, Options opt,
       std::optional<GlobPattern> filter)
      : ctx_(ctx),
        re_(re),
        literal_(std::move(literal)),
        required_(std::move(required)),
        opt_(opt),
        filter_(std::move(filter)) {
    if (filter_) filter_basename_ = filter_->segments().size() == 1 && !filter_->segments()[0].globstar;
  }

  void search_dir(int dirfd, const std::string& rel, int depth) {
    if (depth > kMaxDepth) {
      ++too_deep_;
      return;
    }
    std::vector<DirEntry> entries;
    if (read_dir_sorted(dirfd, entries) != 0) {
      ++unreadable_;
      return;
    }
    // Symlinks are not followed while recursing (as in ripgrep): no loops, no escapes, and no
    // file reported twice. A symlink given as 'path' is searched when it resolves inside.
    for (const DirEntry& e : entries) {
      if (stopped_) return;
      if (e.name == ".git") continue;
      std::string sub = rel.empty() ? e.name : rel + "/" + e.name;
      if (e.type == EntryType::dir) {
        int fd = ::openat(dirfd, e.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
          ++unreadable_;
          continue;
        }
        search_dir(fd, sub, depth + 1);
        ::close(fd);
      } else if (e.type == EntryType::file) {
        if (!wanted(e.name, sub)) continue;
        search_file_at(dirfd, e.name.c_str(), sub, O_NOFOLLOW);
      }
    }
  }

  // Returns false when the file could not be opened (errno in *err).
  bool search_file_at(int dirfd, const char* name, const std::string& rel, int extra_flags, int* err = nullptr) {
    int fd = ::openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | extra_flags);
    if (fd < 0) {
      if (err) *err = errno;
      ++unreadable_;
      return false;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return true;
    }
    ++files_searched_;
    auto size = static_cast<std::uint64_t>(st.st_size);
    if (size == 0) {
      ::close(fd);
      return true;
    }
    if (size > kMaxFileSize) {
      ++too_large_;
      ::close(fd);
      return true;
    }
    if (size >= kMmapThreshold) {
      void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      if (m == MAP_FAILED) {
        ++unreadable_;
        return true;
      }
      ::madvise(m, size, MADV_SEQUENTIAL);
      search_buffer(rel, static_cast<const char*>(m), size);
      ::munmap(m, size);
      return true;
    }
    if (size > buf_cap_) {
      buf_cap_ = std::max<std::size_t>(size, 256 * 1024);
      buf_.reset(new char[buf_cap_]);
    }
    std::size_t got = 0;
    while (got < size) {
      ssize_t r = ::read(fd, buf_.get() + got, size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    ::close(fd);
    if (got) search_buffer(rel, buf_.get(), got);
    return true;
  }

  std::string& out() { return out_; }
  std::size_t matches() const { return total_; }
  std::size_t files_matched() const { return files_matched_; }
  std::size_t files_searched() const { return files_searched_; }
  std::size_t binary_skipped() const { return binary_; }
  std::size_t too_large() const { return too_large_; }
  std::size_t unreadable() const { return unreadable_; }
  std::size_t too_deep() const { return too_deep_; }
  bool stopped() const { return stopped_; }
  bool out_full() const { return out_full_; }

 private:
  bool wanted(const std::string& name, const std::string& rel) const {
    if (!filter_) return true;
    return filter_->match(filter_basename_ ? name : rel);
  }

  // Finds the next match at or after `pos`; sets [ms, me).
  bool next_match(const char* d, std::size_t n, std::size_t pos, std::size_t& ms, std::size_t& me) const {
    if (literal_) {
      const void* hit = ::memmem(d + pos, n - pos, literal_->data(), literal_->size());
      if (!hit) return false;
      ms = static_cast<std::size_t>(static_cast<const char*>(hit) - d);
      me = ms + literal_->size();
      return true;
    }
    re2::StringPiece text(d, n), m;
    if (!re_.Match(text, pos, n, RE2::UNANCHORED, &m, 1)) return false;
    ms = static_cast<std::size_t>(m.data() - d);
    me = ms + m.size();
    return true;
  }

  void search_buffer(const std::string& rel, const char* d, std::size_t n) {
    if (std::memchr(d, 0, std::min(n, kBinarySample))) {
      std::size_t ms, me;
      if (next_match(d, n, 0, ms, me)) ++binary_;
      return;
    }
    File f{rel, d, n};
    std::size_t pos = 0;
    std::size_t in_file = 0, extra = 0;
    bool checked_binary = false;
    while (pos < n) {
      if (!required_.empty()) {
        // A matching line contains the required literal: start at the next line that does.
        const void* hit = ::memmem(d + pos, n - pos, required_.data(), required_.size());
        if (!hit) break;
        std::size_t k = static_cast<std::size_t>(static_cast<const char*>(hit) - d) - pos;
        if (k > 0) {
          const char* nl = static_cast<const char*>(memrchr(d + pos, '\n', k));
          if (nl) pos = static_cast<std::size_t>(nl - d) + 1;
        }
      }
      std::size_t ms, me;
      if (!next_match(d, n, pos, ms, me)) break;
      if (ms == n && n > 0 && d[n - 1] == '\n') break;  // empty match after the final newline
      const char* lsp = static_cast<const char*>(memrchr(d + pos, '\n', ms - pos));
      std::size_t ls = lsp ? static_cast<std::size_t>(lsp - d) + 1 : pos;
      const char* lep = static_cast<const char*>(std::memchr(d + ms, '\n', n - ms));
      std::size_t le = lep ? static_cast<std::size_t>(lep - d) : n;
      bool real = me <= le || re_.PartialMatch(re2::StringPiece(d + ls, le - ls), re_);
      if (real) {
        if (!checked_binary) {
          checked_binary = true;
          if (n > kBinarySample && std::memchr(d + kBinarySample, 0, n - kBinarySample)) {
            ++binary_;
            return;
          }
        }
        if (total_ >= opt_.max_total) {
          stopped_ = true;
          break;
        }
        if (in_file < opt_.max_per_file) {
          if (in_file == 0) ++files_matched_;
          emit_match(f, ls, le, ms);
          ++in_file;
          ++total_;
          if (out_.size() > opt_.out_limit) {
            out_full_ = stopped_ = true;
            break;
          }
        } else if (++extra >= kExtraCountLimit) {
          break;
        }
      }
      pos = le + 1;
    }
    flush_after(f, f.n);
    if (extra) {
      out_ += "[" + std::to_string(extra) + (extra >= kExtraCountLimit ? "+" : "") + " more matching lines in " + rel +
              " not shown (max " + std::to_string(opt_.max_per_file) + " per file)]\n";
    }
  }

  struct File {
    const std::string& rel;
    const char* d;
    std::size_t n;
    std::size_t cursor_off = 0;  // line counting cursor
    std::uint64_t cursor_line = 1;
    bool any = false;             // something printed for this file
    std::size_t printed_end = 0;  // offset just past the last printed line
    std::uint64_t printed_end_line = 1;
    std::size_t after_left = 0;
  };

  std::uint64_t line_at(File& f, std::size_t off) {
    f.cursor_line += static_cast<std::uint64_t>(std::count(f.d + f.cursor_off, f.d + off, '\n'));
    f.cursor_off = off;
    return f.cursor_line;
  }

  void emit(const File& f, std::uint64_t line, std::size_t ls, std::size_t le, bool match, std::size_t hit) {
    std::string_view text(f.d + ls, le - ls);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    out_ += f.rel;
    out_ += match ? ':' : '-';
    out_ += std::to_string(line);
    out_ += match ? ": " : "- ";
    if (text.size() <= kLineDisplay) {
      out_ += text;
    } else {
      std::size_t at = hit >= ls ? std::min(hit - ls, text.size()) : 0;
      std::size_t from = utf8_floor(text, at > kLineDisplay / 3 ? at - kLineDisplay / 3 : 0);
      std::size_t to = utf8_floor(text, std::min(text.size(), from + kLineDisplay));
      if (from > 0) out_ += "…";
      out_ += text.substr(from, to - from);
      if (to < text.size()) out_ += "…";
      out_ += " [line of " + std::to_string(text.size()) + " bytes shortened]";
    }
    out_ += '\n';
  }

  std::size_t line_end(const File& f, std::size_t from) const {
    const char* p = static_cast<const char*>(std::memchr(f.d + from, '\n', f.n - from));
    return p ? static_cast<std::size_t>(p - f.d) : f.n;
  }

  // Prints pending after-context lines that start before `limit`.
  void flush_after(File& f, std::size_t limit) {
    while (f.after_left > 0 && f.printed_end < limit && f.printed_end < f.n) {
      std::size_t le = line_end(f, f.printed_end);
      emit(f, f.printed_end_line, f.printed_end, le, false, 0);
      f.printed_end = le + 1;
      ++f.printed_end_line;
      --f.after_left;
    }
    f.after_left = 0;
  }

  void emit_match(File& f, std::size_t ls, std::size_t le, std::size_t hit) {
    std::uint64_t line = line_at(f, ls);
    if (opt_.context > 0) {
      flush_after(f, ls);
      std::size_t floor = f.any ? f.printed_end : 0;
      std::size_t b = ls;
      std::size_t k = 0;
      while (k < opt_.context && b > floor) {
        const char* p = b >= 2 ? static_cast<const char*>(memrchr(f.d + floor, '\n', b - 1 - floor)) : nullptr;
        b = p ? static_cast<std::size_t>(p - f.d) + 1 : floor;
        ++k;
      }
      if ((f.any && b > f.printed_end) || (!f.any && groups_ > 0)) out_ += "--\n";
      ++groups_;
      std::uint64_t l = line - k;
      while (b < ls) {
        std::size_t e = line_end(f, b);
        emit(f, l++, b, e, false, 0);
        b = e + 1;
      }
    }
    emit(f, line, ls, le, true, hit);
    f.any = true;
    f.printed_end = le + 1;
    f.printed_end_line = line + 1;
    f.after_left = opt_.context;
  }

  const ToolContext& ctx_;
  const RE2& re_;
  std::optional<std::string> literal_;
  std::string required_;
  Options opt_;
  std::optional<GlobPattern> filter_;
  bool filter_basename_ = false;
  std::unique_ptr<char[]> buf_;
  std::size_t buf_cap_ = 0;
  std::string out_;
  std::size_t total_ = 0, files_matched_ = 0, files_searched_ = 0, binary_ = 0, too_large_ = 0;
  std::size_t unreadable_ = 0, too_deep_ = 0;
  std::size_t groups_ = 0;  // context groups printed so far, for "--" separators
  bool stopped_ = false, out_full_ = false;
};

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

ToolOutput grep(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  std::string pattern = a.str("pattern");
  if (pattern.empty()) throw ToolError("argument 'pattern' is empty");
  WsPath base = resolve_path(ctx, a.opt_str("path").value_or("."), "path");
  std::optional<std::string> glob_arg = a.opt_str("glob");
  bool ci = a.boolean("case_insensitive", false);
  Options opt;
  opt.max_total = static_cast<std::size_t>(a.integer("max_matches", 100, 1, 10000));
  opt.max_per_file = static_cast<std::size_t>(a.integer("max_per_file", 20, 1, 10000));
  opt.context = static_cast<std::size_t>(a.integer("context", 0, 0, 20));
  opt.out_limit = ctx.result_cap + 1024;

  RE2::Options ro;
  ro.set_log_errors(false);
  ro.set_case_sensitive(!ci);
  ro.set_max_mem(64 << 20);
  // (?m): ^ and $ match at line boundaries, since whole files are searched at once.
  RE2 re("(?m)" + pattern, ro);
  if (!re.ok()) {
    RE2 plain(pattern, ro);
    throw ToolError("invalid regex '" + pattern + "': " + (plain.ok() ? re.error() : plain.error()) +
                    " (RE2 syntax: no backreferences or lookaround)");
  }
  std::optional<std::string> literal;
  std::string required;
  if (!ci && is_plain_literal(pattern)) {
    literal = pattern;
  } else if (!ci) {
    required = required_literal(pattern);
    if (required.size() < 3) required.clear();
  }
  std::optional<GlobPattern> filter;
  if (glob_arg && !glob_arg->empty()) filter.emplace(*glob_arg);

  Grep g(ctx, re, literal, std::move(required), opt, std::move(filter));
  struct stat st;
  if (::stat(base.abs.c_str(), &st) != 0) throw ToolError(describe_errno(errno, base.rel));
  if (S_ISDIR(st.st_mode)) {
    int fd = open_dir_or_throw(base);
    g.search_dir(fd, base.rel == "." ? std::string() : base.rel, 0);
    ::close(fd);
  } else {
    int err = 0;
    if (!g.search_file_at(AT_FDCWD, base.abs.c_str(), base.rel, 0, &err)) {
      throw ToolError(describe_errno(err, base.rel));
    }
  }

  ToolOutput out;
  std::string& text = g.out();
  const std::string where = base.rel == "." ? "the workspace" : "'" + base.rel + "'";
  if (g.matches() == 0) {
    text += "no matches for /" + pattern + "/ in " + where + " (" + plural(g.files_searched(), "file", "files") +
            " searched)\n";
  } else {
    text += "[" + plural(g.matches(), "match", "matches") + " in " + plural(g.files_matched(), "file", "files") + "; " +
            plural(g.files_searched(), "file", "files") + " searched]\n";
  }
  if (g.out_full()) {
    text +=
        "[stopped: output limit reached; narrow the search with 'path', 'glob' or a more "
        "specific pattern]\n";
  } else if (g.stopped()) {
    text += "[stopped at max_matches=" + std::to_string(opt.max_total) +
            "; more matches exist. Narrow the search with 'path', 'glob' or a more specific "
            "pattern]\n";
  }
  if (g.binary_skipped()) {
    text += "[" + plural(g.binary_skipped(), "binary file", "binary files") + " with matches skipped]\n";
  }
  if (g.too_large()) text += "[" + plural(g.too_large(), "file", "files") + " over 1 GiB skipped]\n";
  if (g.unreadable()) {
    text += "[" + plural(g.unreadable(), "path", "paths") + " could not be read]\n";
  }
  if (g.too_deep()) {
    text += "[directories nested deeper than " + std::to_string(kMaxDepth) + " levels skipped]\n";
  }
  out.content = std::move(text);
  return out;
}

}  // namespace child::tools_detail
