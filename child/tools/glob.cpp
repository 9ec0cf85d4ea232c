// glob: files and directories matching a shell pattern, relative to the workspace.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common.hpp"
#include "glob_match.hpp"

namespace child::tools_detail {

namespace {

constexpr std::size_t kCollectLimit = 100000;
constexpr int kMaxDepth = 64;

class GlobWalk {
 public:
  explicit GlobWalk(const GlobPattern& pat) : segs_(pat.segments()) {}

  void walk(int dirfd, const std::string& rel, std::size_t i, int depth) {
    if (results_.size() >= kCollectLimit) {
      hit_limit_ = true;
      return;
    }
    if (depth > kMaxDepth) {
      too_deep_ = true;
      return;
    }
    const auto& seg = segs_[i];
    const bool last = i + 1 == segs_.size();
    if (!seg.globstar && seg.pat.is_literal()) {
      const std::string& name = seg.pat.text();
      if (name == ".git") return;
      struct stat st;
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
      bool is_dir = S_ISDIR(st.st_mode);
      if (last) {
        add(join(rel, name), is_dir);
      } else if (is_dir) {
        descend(dirfd, name, join(rel, name), i + 1, depth);
      }
      return;
    }
    if (seg.globstar && !last) walk(dirfd, rel, i + 1, depth);  // ** as zero directories
    std::vector<DirEntry> entries;
    if (read_dir_sorted(dirfd, entries) != 0) {
      ++unreadable_;
      return;
    }
    for (const DirEntry& e : entries) {
      if (e.name == ".git") continue;
      const bool is_dir = e.type == EntryType::dir;
      std::string sub = join(rel, e.name);
      if (seg.globstar) {
        if (last) add(sub, is_dir);
        if (is_dir) descend(dirfd, e.name, sub, i, depth);
      } else if (seg.pat.match(e.name)) {
        if (last) {
          add(sub, is_dir);
        } else if (is_dir) {
          descend(dirfd, e.name, sub, i + 1, depth);
        }
      }
    }
  }

  std::vector<std::string>& results() { return results_; }
  bool hit_limit() const { return hit_limit_; }
  bool too_deep() const { return too_deep_; }
  std::size_t unreadable() const { return unreadable_; }

 private:
  static std::string join(const std::string& rel, const std::string& name) {
    return rel.empty() || rel == "." ? name : rel + "/" + name;
  }

  void descend(int dirfd, const std::string& name, const std::string& rel, std::size_t i, int depth) {
    int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      ++unreadable_;
      return;
    }
    walk(fd, rel, i, depth + 1);
    ::close(fd);
  }

  void add(std::string rel, bool is_dir) {
    if (is_dir) rel += '/';
    results_.push_back(std::move(rel));
  }

  const std::vector<GlobPattern::Segment>& segs_;
  std::vector<std::string> results_;
  bool hit_limit_ = false;
  bool too_deep_ = false;
  std::size_t unreadable_ = 0;
};

}  // namespace

ToolOutput glob(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  std::string pattern = a.str("pattern");
  WsPath base = resolve_path(ctx, a.opt_str("path").value_or("."), "path");
  std::int64_t max_results = a.integer("max_results", 200, 1, 100000);
  if (!pattern.empty() && pattern.front() == '/') {
    WsPath abs = resolve_path(ctx, pattern, "pattern");
    if (base.rel != ".") {
      throw ToolError("an absolute pattern cannot be combined with 'path'; give one or the other");
    }
    pattern = abs.rel;
  }
  GlobPattern pat(pattern);
  int fd = open_dir_or_throw(base);
  GlobWalk walk(pat);
  walk.walk(fd, base.rel == "." ? std::string() : base.rel, 0, 0);
  ::close(fd);

  auto& res = walk.results();
  std::sort(res.begin(), res.end());
  res.erase(std::unique(res.begin(), res.end()), res.end());
  ToolOutput out;
  const std::string where = base.rel == "." ? "the workspace" : "'" + base.rel + "'";
  if (res.empty()) {
    out.content = "no paths match '" + pattern + "' under " + where + "\n";
  } else {
    std::size_t shown = std::min<std::size_t>(res.size(), static_cast<std::size_t>(max_results));
    for (std::size_t k = 0; k < shown; ++k) out.content += res[k] + "\n";
    if (shown < res.size()) {
      out.content += "... " + std::to_string(res.size() - shown) + " more (max_results=" + std::to_string(max_results) +
                     "; narrow the pattern)\n";
    }
  }
  if (walk.hit_limit()) {
    out.content += "[stopped after " + std::to_string(kCollectLimit) + " matches]\n";
  }
  if (walk.too_deep()) {
    out.content += "[directories nested deeper than " + std::to_string(kMaxDepth) + " levels were not searched]\n";
  }
  if (walk.unreadable()) {
    out.content += "[" + std::to_string(walk.unreadable()) + " directories could not be read]\n";
  }
  return out;
}

}  // namespace child::tools_detail
