// write_file and edit_file. Files are rewritten in place (same inode, mode and owner), so hard
// links, permissions and the worker's Landlock write rules all keep applying.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "common.hpp"

namespace child::tools_detail {

namespace {

namespace fs = std::filesystem;

std::string read_whole(const WsPath& p) {
  int fd = ::open(p.abs.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == EISDIR) throw ToolError("'" + p.rel + "' is a directory");
    throw ToolError(describe_errno(err, p.rel));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ToolError("'" + p.rel + "' is not a regular file");
  }
  std::string data;
  data.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  for (;;) {
    if (got == data.size()) data.resize(data.size() + 65536);
    ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      throw ToolError(describe_errno(err, p.rel));
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

// Returns true when the file was created.
bool write_whole(const ToolContext& ctx, const WsPath& p, std::string_view content) {
  std::error_code ec;
  fs::path parent = p.abs.parent_path();
  if (!fs::is_directory(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) {
      throw ToolError("cannot create directory '" + relative_to_workspace(ctx, parent) + "': " + ec.message());
    }
  }
  bool existed = ::access(p.abs.c_str(), F_OK) == 0;
  // O_NONBLOCK: a FIFO at this path must fail, not hang the child waiting for a reader.
  int fd = ::open(p.abs.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
  if (fd < 0) {
    int err = errno;
    if (err == EISDIR) throw ToolError("'" + p.rel + "' is a directory");
    if (err == ENXIO) throw ToolError("'" + p.rel + "' is not a regular file");
    throw ToolError("cannot write " + describe_errno(err, p.rel));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ToolError("'" + p.rel + "' is not a regular file");
  }
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t r = ::write(fd, content.data() + done, content.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      throw ToolError("writing " + describe_errno(err, p.rel) + " (after " + std::to_string(done) +
                      " bytes; the file is now incomplete)");
    }
    done += static_cast<std::size_t>(r);
  }
  if (::close(fd) != 0 && errno != EINTR) {
    throw ToolError("writing " + describe_errno(errno, p.rel));
  }
  return !existed;
}

std::size_t count_occurrences(std::string_view hay, std::string_view needle, std::size_t* first = nullptr) {
  std::size_t n = 0;
  for (std::size_t pos = hay.find(needle); pos != std::string_view::npos; pos = hay.find(needle, pos + needle.size())) {
    if (n == 0 && first) *first = pos;
    ++n;
  }
  return n;
}

}  // namespace

ToolOutput write_file(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  WsPath p = resolve_path(ctx, a.str("path"), "path");
  std::string content = a.str("content");
  if (p.rel == ".") throw ToolError("'path' names the workspace itself; give a file path");
  bool created = write_whole(ctx, p, content);
  ToolOutput out;
  out.content =
      std::string(created ? "created " : "overwrote ") + p.rel + " (" + std::to_string(content.size()) + " bytes)";
  out.files_changed.push_back(p.rel);
  return out;
}

ToolOutput edit_file(const nlohmann::json& args, const ToolContext& ctx) {
  Args a(args);
  WsPath p = resolve_path(ctx, a.str("path"), "path");
  std::string old_s = a.str("old_string");
  std::string new_s = a.str("new_string");
  bool all = a.boolean("replace_all", false);
  if (old_s.empty()) {
    throw ToolError("'old_string' is empty; to create or overwrite a whole file use write_file");
  }
  if (old_s == new_s) throw ToolError("'old_string' and 'new_string' are identical; nothing to do");
  std::string data = read_whole(p);
  std::size_t first = 0;
  std::size_t n = count_occurrences(data, old_s, &first);
  if (n == 0) {
    throw ToolError("'old_string' was not found in '" + p.rel +
                    "' (0 matches); read the file and copy the text exactly, including "
                    "whitespace and indentation");
  }
  if (n > 1 && !all) {
    throw ToolError("'old_string' matches " + std::to_string(n) + " times in '" + p.rel +
                    "'; include more surrounding lines to make it unique, or set replace_all=true "
                    "to replace every occurrence");
  }
  std::string result;
  result.reserve(data.size() + n * new_s.size());
  std::size_t from = 0;
  for (std::size_t pos = data.find(old_s); pos != std::string::npos; pos = data.find(old_s, from)) {
    result.append(data, from, pos - from);
    result += new_s;
    from = pos + old_s.size();
  }
  result.append(data, from, std::string::npos);
  write_whole(ctx, p, result);
  std::size_t line =
      1 + static_cast<std::size_t>(std::count(data.begin(), data.begin() + static_cast<long>(first), '\n'));
  ToolOutput out;
  out.content = "edited " + p.rel + ": replaced " + std::to_string(n) + (n == 1 ? " occurrence" : " occurrences") +
                " (first at line " + std::to_string(line) + "); file is now " + std::to_string(result.size()) +
                " bytes";
  out.files_changed.push_back(p.rel);
  return out;
}

}  // namespace child::tools_detail
