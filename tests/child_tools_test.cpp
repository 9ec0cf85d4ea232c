#include "child/tools.hpp"
#include "protocol/tools.hpp"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "child-tools-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    REQUIRE(p != nullptr);
    path_ = fs::canonical(p);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void put(const fs::path& p, std::string_view content) {
  fs::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  REQUIRE(f.good());
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

bool has(const std::string& hay, std::string_view needle) { return hay.find(needle) != std::string::npos; }

struct Ws {
  TempDir dir;
  child::ToolContext ctx;
  Ws() { ctx.workspace = dir.path(); }
  fs::path operator/(const std::string& rel) const { return dir.path() / rel; }
  child::ToolOutput run(const std::string& tool, const json& args) {
    child::ToolOutput out = child::run_tool(tool, args, ctx);
    CHECK(out.content.size() <= ctx.result_cap);
    CHECK(valid_utf8(out.content));
    return out;
  }
};

std::string numbered_lines(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += "line " + std::to_string(i) + "\n";
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

bool running_as_root() { return ::geteuid() == 0; }

// True once `pid` is gone or a zombie (a zombie has been killed; init reaps it).
bool process_gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (stat.empty()) return true;
    auto rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z') return true;
    ::usleep(10000);
  }
  return false;
}

}  // namespace

TEST_CASE("tool_specs and local_tool_names") {
  auto names = child::local_tool_names();
  std::set<std::string> set(names.begin(), names.end());
  for (const char* n : {"read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "run_command", "git_status",
                        "git_log", "git_show", "git_diff"}) {
    CHECK(set.count(n) == 1);
  }
  json specs = child::tool_specs(names);
  REQUIRE(specs.size() == names.size());
  for (const auto& s : specs) {
    CHECK(s["name"].is_string());
    CHECK(s["description"].get<std::string>().size() > 40);
    CHECK(s["input_schema"]["type"] == "object");
    CHECK(s["input_schema"]["properties"].is_object());
  }
  // The child implements exactly the catalogue's "child" tools, and offers the catalogue's text.
  std::set<std::string> catalogue_local;
  for (const auto& t : protocol::tool_catalogue())
    if (t.runs_in == protocol::RunsIn::child) catalogue_local.insert(t.name);
  CHECK(catalogue_local == set);
  CHECK(specs[0] == protocol::find_tool(names[0])->spec());
  CHECK(child::tool_specs({"web_fetch"}).empty());  // brokered: the supervisor runs it
  json some = child::tool_specs({"grep", "no_such_tool", "read_file"});
  REQUIRE(some.size() == 2);
  CHECK(some[0]["name"] == "grep");
  CHECK(some[1]["name"] == "read_file");
  CHECK(some[1]["input_schema"]["required"] == json::array({"path"}));
}

TEST_CASE("run_tool never throws on bad input") {
  Ws ws;
  auto out = ws.run("no_such_tool", json::object());
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "unknown tool 'no_such_tool'"));

  out = ws.run("read_file", json::array({1, 2}));
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "JSON object"));

  out = ws.run("read_file", json::object());
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "missing required argument 'path'"));

  out = ws.run("read_file", {{"path", 42}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'path' must be a string"));

  put(ws / "a.txt", "x\n");
  out = ws.run("read_file", {{"path", "a.txt"}, {"start_line", "two"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'start_line' must be an integer"));

  out = ws.run("read_file", {{"path", "a.txt"}, {"start_line", "1"}});  // numeric strings are fine
  CHECK(out.ok);
}

TEST_CASE("read_file: line ranges and numbering") {
  Ws ws;
  put(ws / "f.txt", numbered_lines(20));

  auto out = ws.run("read_file", {{"path", "f.txt"}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "f.txt (20 lines"));
  CHECK(has(out.content, "   1\tline 1\n"));
  CHECK(has(out.content, "  20\tline 20\n"));

  out = ws.run("read_file", {{"path", "f.txt"}, {"start_line", 3}, {"end_line", 5}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "lines 3-5"));
  CHECK(has(out.content, "   3\tline 3\n   4\tline 4\n   5\tline 5\n"));
  CHECK_FALSE(has(out.content, "line 2\n"));
  CHECK_FALSE(has(out.content, "line 6\n"));

  out = ws.run("read_file", {{"path", "f.txt"}, {"start_line", 19}, {"end_line", 500}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "  19\tline 19\n  20\tline 20\n"));

  out = ws.run("read_file", {{"path", "f.txt"}, {"start_line", 21}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "start_line 21 is past the end of 'f.txt' (20 lines)"));

  out = ws.run("read_file", {{"path", "f.txt"}, {"start_line", 5}, {"end_line", 4}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'end_line'"));

  put(ws / "nonl.txt", "a\nb");
  out = ws.run("read_file", {{"path", "nonl.txt"}, {"start_line", 2}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "(2 lines"));
  CHECK(has(out.content, "   2\tb\n"));

  put(ws / "empty.txt", "");
  out = ws.run("read_file", {{"path", "empty.txt"}});
  CHECK(out.ok);
  CHECK(has(out.content, "empty"));
}

TEST_CASE("read_file: max_bytes stops at a line and says where to continue") {
  Ws ws;
  put(ws / "big.txt", numbered_lines(5000));
  auto out = ws.run("read_file", {{"path", "big.txt"}, {"max_bytes", 2000}});
  REQUIRE(out.ok);
  CHECK(out.content.size() <= 2000);
  CHECK(has(out.content, "(5000 lines"));
  auto pos = out.content.find("continue with start_line=");
  REQUIRE(pos != std::string::npos);
  int next = std::atoi(out.content.c_str() + pos + 25);
  CHECK(next > 50);
  CHECK(has(out.content, std::to_string(next - 1) + "\tline " + std::to_string(next - 1) + "\n"));
  CHECK_FALSE(has(out.content, "\tline " + std::to_string(next) + "\n"));

  auto more = ws.run("read_file", {{"path", "big.txt"}, {"start_line", next}, {"max_bytes", 2000}});
  REQUIRE(more.ok);
  CHECK(has(more.content, std::to_string(next) + "\tline " + std::to_string(next) + "\n"));
}

TEST_CASE("read_file: a first line longer than the limit is cut on a character boundary") {
  Ws ws;
  std::string line;
  for (int i = 0; i < 3000; ++i) line += "\xc3\xa9";  // 'é', two bytes
  put(ws / "long.txt", "x" + line + "\nnext\n");
  for (int max : {1000, 1001, 1002, 1003}) {
    CAPTURE(max);
    auto out = ws.run("read_file", {{"path", "long.txt"}, {"max_bytes", max}});
    REQUIRE(out.ok);
    CHECK(has(out.content, " [line cut]\n"));
    CHECK_FALSE(has(out.content, "\xef\xbf\xbd"));  // no replacement character: cut was clean
    CHECK_FALSE(has(out.content, "next"));
    CHECK(has(out.content, "is longer than the output limit"));
  }
  auto out = ws.run("read_file", {{"path", "long.txt"}, {"start_line", 2}, {"max_bytes", 1000}});
  CHECK(has(out.content, "   2\tnext\n"));
}

TEST_CASE("read_file: binary detection") {
  Ws ws;
  put(ws / "nul.bin", std::string("abc\0def", 7));
  auto out = ws.run("read_file", {{"path", "nul.bin"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "nul.bin"));
  CHECK(has(out.content, "binary file"));

  put(ws / "latin1.txt", "caf\xe9\n");
  out = ws.run("read_file", {{"path", "latin1.txt"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "binary file"));

  // A NUL past the first 8 KiB does not make a file binary; a multi-byte character straddling
  // the 8 KiB sample boundary is still valid UTF-8.
  std::string text(8191, 'x');
  text += "\xe2\x82\xac\n";  // '€' spans bytes 8191..8193
  put(ws / "straddle.txt", text);
  out = ws.run("read_file", {{"path", "straddle.txt"}});
  CHECK(out.ok);
  CHECK(has(out.content, "binary") == false);
}

TEST_CASE("read_file: clear errors naming the path") {
  Ws ws;
  fs::create_directories(ws / "sub");
  auto out = ws.run("read_file", {{"path", "missing.txt"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'missing.txt' does not exist"));

  out = ws.run("read_file", {{"path", "sub"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'sub' is a directory"));

  out = ws.run("read_file", {{"path", "sub/x/../../../etc/passwd"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "outside the workspace"));

  put(ws / "secret.txt", "s\n");
  put(ws / "open.txt", "o\n");
  fs::permissions(ws / "secret.txt", fs::perms::none);
  fs::permissions(ws / "open.txt", fs::perms::owner_read | fs::perms::others_read);
  fs::permissions(ws.dir.path(), fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  // Root reads mode-000 files, so as root the check runs in a child that drops to nobody.
  auto check = [&](const char* path, const char* expect) {
    auto probe = [&] {
      auto o = child::run_tool("read_file", {{"path", path}}, ws.ctx);
      return has(o.content, expect);
    };
    if (!running_as_root()) return probe();
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
      ::_exit(probe() ? 0 : 1);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
  };
  CHECK(check("secret.txt", "permission denied: 'secret.txt'"));
  CHECK(check("open.txt", "   1\to\n"));  // the twin: a readable file reads fine as the same user
}

TEST_CASE("paths: escapes are refused with a clear error") {
  Ws ws;
  TempDir outside;
  put(outside.path() / "x.txt", "outside\n");
  put(ws / "in.txt", "inside\n");
  fs::create_symlink(outside.path(), ws / "link_out");
  fs::create_symlink(outside.path() / "x.txt", ws / "file_out");

  for (std::string p : {std::string("../x.txt"), outside.path().string() + "/x.txt", std::string("a/../../x.txt"),
                        std::string("/etc/passwd"), std::string("link_out/x.txt"), std::string("file_out")}) {
    CAPTURE(p);
    auto out = ws.run("read_file", {{"path", p}});
    CHECK_FALSE(out.ok);
    CHECK(has(out.content, "outside the workspace"));
  }
  // The twin: the same file under its absolute path inside the workspace is fine.
  auto out = ws.run("read_file", {{"path", (ws / "in.txt").string()}});
  CHECK(out.ok);
  CHECK(has(out.content, "inside"));
  out = ws.run("read_file", {{"path", "./sub/../in.txt"}});
  CHECK(out.ok);

  out = ws.run("write_file", {{"path", "../escape.txt"}, {"content", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "outside the workspace"));
  CHECK_FALSE(fs::exists(ws.dir.path().parent_path() / "escape.txt"));
  out = ws.run("write_file", {{"path", "link_out/new.txt"}, {"content", "x"}});
  CHECK_FALSE(out.ok);
  CHECK_FALSE(fs::exists(outside.path() / "new.txt"));
  out = ws.run("list_dir", {{"path", ".."}});
  CHECK_FALSE(out.ok);
  out = ws.run("grep", {{"pattern", "x"}, {"path", "/"}});
  CHECK_FALSE(out.ok);
}

TEST_CASE("list_dir: sorted, directories marked, sizes, cap") {
  Ws ws;
  put(ws / "b.txt", "12345");
  put(ws / "a.txt", "");
  fs::create_directories(ws / "dir");
  fs::create_symlink("a.txt", ws / "lnk");
  auto out = ws.run("list_dir", json::object());
  REQUIRE(out.ok);
  CHECK(has(out.content, "(4 entries)"));
  auto a = out.content.find("a.txt  0 B\n");
  auto b = out.content.find("b.txt  5 B\n");
  auto d = out.content.find("dir/\n");
  auto l = out.content.find("lnk -> a.txt\n");
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  REQUIRE(d != std::string::npos);
  REQUIRE(l != std::string::npos);
  CHECK(a < b);
  CHECK(b < d);
  CHECK(d < l);

  out = ws.run("list_dir", {{"max_entries", 2}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "... 2 more (max_entries=2)"));
  CHECK_FALSE(has(out.content, "dir/"));

  out = ws.run("list_dir", {{"path", "b.txt"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "not a directory"));
  out = ws.run("list_dir", {{"path", "nope"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'nope' does not exist"));
}

TEST_CASE("glob: *, ?, classes and ** across directories, skipping .git") {
  Ws ws;
  for (const char* f :
       {"z.cpp", "a/y.cpp", "a/b/c/x.cpp", "a/b/n.hpp", ".git/q.cpp", "a/.git/r.cpp", "docs/readme.md", "a/b/c/x.cc"}) {
    put(ws / f, "x\n");
  }
  auto out = ws.run("glob", {{"pattern", "**/*.cpp"}});
  REQUIRE(out.ok);
  CHECK(out.content == "a/b/c/x.cpp\na/y.cpp\nz.cpp\n");

  out = ws.run("glob", {{"pattern", "*.cpp"}});
  CHECK(out.content == "z.cpp\n");

  out = ws.run("glob", {{"pattern", "a/**/x.c?"}});
  CHECK(out.content == "a/b/c/x.cc\n");

  out = ws.run("glob", {{"pattern", "a/*"}});
  CHECK(out.content == "a/b/\na/y.cpp\n");

  out = ws.run("glob", {{"pattern", "[xy].cpp"}, {"path", "a"}});
  CHECK(out.content == "a/y.cpp\n");
  out = ws.run("glob", {{"pattern", "**/[!x].*"}});
  CHECK(out.content == "a/b/n.hpp\na/y.cpp\nz.cpp\n");

  out = ws.run("glob", {{"pattern", "a/**"}});
  CHECK(has(out.content, "a/b/c/x.cpp\n"));
  CHECK_FALSE(has(out.content, ".git"));

  out = ws.run("glob", {{"pattern", "**/*.c*"}, {"max_results", 2}});
  CHECK(out.content == "a/b/c/x.cc\na/b/c/x.cpp\n... 2 more (max_results=2; narrow the pattern)\n");

  out = ws.run("glob", {{"pattern", "**/*.rs"}});
  CHECK(out.ok);
  CHECK(has(out.content, "no paths match"));

  out = ws.run("glob", {{"pattern", "../*"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'..'"));
  out = ws.run("glob", {{"pattern", "a/[bc"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "unterminated"));
}

TEST_CASE("glob: symlinked directories are not followed") {
  Ws ws;
  TempDir outside;
  put(outside.path() / "secret.cpp", "x\n");
  put(ws / "real/in.cpp", "x\n");
  fs::create_symlink(outside.path(), ws / "out");
  auto out = ws.run("glob", {{"pattern", "**/*.cpp"}});
  CHECK(out.content == "real/in.cpp\n");
}

TEST_CASE("grep: matches, format, .git and binaries skipped") {
  Ws ws;
  put(ws / "src/a.cpp", "int main() {\n  return foo(1);\n}\n");
  put(ws / "src/b.hpp", "// foo declared here\nint foo(int);\n");
  put(ws / ".git/config", "foo in git\n");
  put(ws / "bin/blob", std::string("foo\0\x01\x02", 6));
  put(ws / "notes.txt", "nothing\r\nFOO upper\r\n");

  auto out = ws.run("grep", {{"pattern", "foo"}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "src/a.cpp:2:   return foo(1);\n"));
  CHECK(has(out.content, "src/b.hpp:1: // foo declared here\n"));
  CHECK(has(out.content, "src/b.hpp:2: int foo(int);\n"));
  CHECK_FALSE(has(out.content, "git"));
  CHECK_FALSE(has(out.content, "bin/blob:"));
  CHECK(has(out.content, "1 binary file with matches skipped"));
  CHECK(has(out.content, "3 matches in 2 files"));
  CHECK(out.content.find("src/a.cpp") < out.content.find("src/b.hpp"));

  out = ws.run("grep", {{"pattern", "foo"}, {"case_insensitive", true}, {"path", "notes.txt"}});
  CHECK(has(out.content, "notes.txt:2: FOO upper\n"));  // \r stripped

  out = ws.run("grep", {{"pattern", "^int"}, {"glob", "*.hpp"}});
  CHECK(has(out.content, "src/b.hpp:2: int foo(int);\n"));
  CHECK_FALSE(has(out.content, "a.cpp"));

  out = ws.run("grep", {{"pattern", "foo"}, {"glob", "src/**/*.cpp"}});
  CHECK(has(out.content, "src/a.cpp:2:"));
  CHECK_FALSE(has(out.content, "b.hpp"));

  out = ws.run("grep", {{"pattern", "\\)$"}});
  CHECK(has(out.content, "src/a.cpp:1: int main() {") == false);
  CHECK(has(out.content, "src/b.hpp:2:") == false);

  out = ws.run("grep", {{"pattern", "nomatch_xyz"}});
  CHECK(out.ok);
  CHECK(has(out.content, "no matches for /nomatch_xyz/"));

  out = ws.run("grep", {{"pattern", "x"}, {"path", "missing"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'missing' does not exist"));
}

TEST_CASE("grep: invalid regex names the pattern") {
  Ws ws;
  put(ws / "a.txt", "x\n");
  auto out = ws.run("grep", {{"pattern", "foo(bar"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "invalid regex 'foo(bar'"));
  CHECK(has(out.content, "missing )"));
  out = ws.run("grep", {{"pattern", "(a)\\1"}});  // backreferences are not RE2
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "invalid regex"));
}

TEST_CASE("grep: a pathological pattern finishes fast") {
  Ws ws;
  std::string line(200000, 'a');
  line += "b\n";
  put(ws / "evil.txt", line + line);
  auto t0 = std::chrono::steady_clock::now();
  auto out = ws.run("grep", {{"pattern", "(a+)+$"}});
  // A backtracking engine needs about 2^200000 steps here; RE2 is linear.
  CHECK(seconds_since(t0) < 5.0);
  CHECK(out.ok);
  CHECK(has(out.content, "no matches"));

  out = ws.run("grep", {{"pattern", "(a|aa)*b"}});
  CHECK(has(out.content, "evil.txt:1: "));
  CHECK(has(out.content, "[line of 200001 bytes shortened]"));
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("grep: caps per file and in total, context lines") {
  Ws ws;
  std::string many;
  for (int i = 1; i <= 50; ++i) many += "hit " + std::to_string(i) + "\n";
  put(ws / "a.txt", many);
  put(ws / "b.txt", many);
  put(ws / "c.txt", "one\ntwo\nthree hit\nfour\nfive\nsix\nseven hit\neight\n");

  auto out = ws.run("grep", {{"pattern", "hit"}, {"max_per_file", 5}, {"path", "a.txt"}});
  CHECK(has(out.content, "a.txt:5: hit 5\n"));
  CHECK_FALSE(has(out.content, "a.txt:6:"));
  CHECK(has(out.content, "[45 more matching lines in a.txt not shown (max 5 per file)]"));

  out = ws.run("grep", {{"pattern", "hit"}, {"max_matches", 30}});
  CHECK(has(out.content, "a.txt:20: hit 20\n"));
  CHECK(has(out.content, "b.txt:10: hit 10\n"));
  CHECK_FALSE(has(out.content, "b.txt:11:"));
  CHECK(has(out.content, "stopped at max_matches=30"));

  out = ws.run("grep", {{"pattern", "hit"}, {"path", "c.txt"}, {"context", 1}});
  CHECK(out.content.rfind("c.txt-2- two\nc.txt:3: three hit\nc.txt-4- four\n--\n"
                          "c.txt-6- six\nc.txt:7: seven hit\nc.txt-8- eight\n",
                          0) == 0);
  out = ws.run("grep", {{"pattern", "hit"}, {"path", "c.txt"}, {"context", 2}});
  CHECK(out.content.rfind("c.txt-1- one\nc.txt-2- two\nc.txt:3: three hit\nc.txt-4- four\nc.txt-5- five\n"
                          "c.txt-6- six\nc.txt:7: seven hit\nc.txt-8- eight\n[",
                          0) == 0);

  // Output is capped like every tool result.
  ws.ctx.result_cap = 500;
  out = ws.run("grep", {{"pattern", "hit"}, {"max_matches", 1000}, {"max_per_file", 1000}});
  CHECK(out.truncated);
  CHECK(out.original_bytes > 500);
}

TEST_CASE("grep: matches spanning lines are attributed to real lines only") {
  Ws ws;
  put(ws / "a.txt", "foo\nbar\nfoo bar\n");
  auto out = ws.run("grep", {{"pattern", "foo\\s+bar"}});
  CHECK(has(out.content, "a.txt:3: foo bar\n"));
  CHECK_FALSE(has(out.content, "a.txt:1:"));
  CHECK(has(out.content, "1 match in 1 file"));
}

TEST_CASE("grep: the literal prefilter never loses a match") {
  Ws ws;
  put(ws / "a.txt",
      "color\ncolour\ncolr\nbarbaz\nfoobaz\nqux\naabc\nabc\nx.y\nxzy\nAB_MAX \nab_max\n"
      "line with \xc3\xa9t\xc3\xa9\n(lit)\n");
  struct Case {
    const char* pattern;
    std::vector<int> lines;
  };
  const Case cases[] = {
      {"colou?r", {1, 2}},      {"(foo|bar)baz", {4, 5}},
      {"qux|colr", {3, 6}},     {"a{2}bc", {7}},
      {"^abc$", {8}},           {"x\\.y", {9}},
      {"x[.z]y", {9, 10}},      {"[A-Z]+_MAX\\b", {11}},
      {"ab_max$", {12}},        {"\xc3\xa9t\xc3\xa9", {13}},
      {"\\(lit\\)", {14}},      {"colou*r", {1, 2}},
      {"(?i)AB_max", {11, 12}}, {"\\Qx.y\\E", {9}},
  };
  for (const Case& c : cases) {
    std::string pattern = c.pattern;
    CAPTURE(pattern);
    auto out = ws.run("grep", {{"pattern", c.pattern}});
    REQUIRE(out.ok);
    std::string want;
    for (int l : c.lines) want += "a.txt:" + std::to_string(l) + ": ";
    std::string got;
    for (std::size_t pos = 0; (pos = out.content.find("a.txt:", pos)) != std::string::npos;) {
      auto colon = out.content.find(": ", pos);
      got += out.content.substr(pos, colon + 2 - pos);
      pos = colon;
    }
    CHECK(got == want);
  }
}

TEST_CASE("grep: context groups in different files are separated") {
  Ws ws;
  put(ws / "a.txt", "x\nhit\ny\n");
  put(ws / "b.txt", "hit\nz\n");
  auto out = ws.run("grep", {{"pattern", "hit"}, {"context", 1}});
  CHECK(out.content.rfind("a.txt-1- x\na.txt:2: hit\na.txt-3- y\n--\nb.txt:1: hit\nb.txt-2- z\n", 0) == 0);
}

TEST_CASE("grep: symlinked directories are not followed out of the workspace") {
  Ws ws;
  TempDir outside;
  put(outside.path() / "secret.txt", "needle\n");
  put(ws / "in.txt", "needle\n");
  fs::create_symlink(outside.path(), ws / "out");
  auto out = ws.run("grep", {{"pattern", "needle"}});
  CHECK(has(out.content, "in.txt:1: needle"));
  CHECK_FALSE(has(out.content, "secret"));
}

TEST_CASE("result cap: cut on a UTF-8 boundary with a note, at every size") {
  Ws ws;
  // Names of mixed byte widths so every cut position lands inside some character.
  for (int i = 0; i < 12; ++i) {
    put(ws / ("d/\xe2\x82\xac\xc3\xa9\xf0\x9f\x98\x80" + std::to_string(i) + ".txt"), "");
  }
  ws.ctx.result_cap = 1 << 20;
  auto full = ws.run("glob", {{"pattern", "d/*"}});
  REQUIRE(full.ok);
  const std::size_t n = full.content.size();
  REQUIRE(n > 150);
  for (std::size_t cap = 1; cap <= n + 2; ++cap) {
    CAPTURE(cap);
    ws.ctx.result_cap = cap;
    auto out = ws.run("glob", {{"pattern", "d/*"}});
    CHECK(out.original_bytes == n);
    CHECK(out.truncated == (n > cap));
    if (n <= cap) {
      CHECK(out.content == full.content);
    } else if (cap >= 80) {
      auto note = out.content.rfind("\n[output truncated: " + std::to_string(n) + " bytes, showing first ");
      REQUIRE(note != std::string::npos);
      CHECK(full.content.compare(0, note, out.content, 0, note) == 0);
      CHECK(has(out.content, "showing first " + std::to_string(note) + "]"));
      CHECK(out.content.size() > cap - 8);  // the cut wastes at most one partial character
    }
  }
}

TEST_CASE("write_file: creates parents, overwrites, reports bytes") {
  Ws ws;
  auto out = ws.run("write_file", {{"path", "new/dir/f.txt"}, {"content", "h\xc3\xa9llo\n"}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "created new/dir/f.txt (7 bytes)"));
  CHECK(out.files_changed == std::vector<std::string>{"new/dir/f.txt"});
  CHECK(slurp(ws / "new/dir/f.txt") == "h\xc3\xa9llo\n");

  out = ws.run("write_file", {{"path", "new/dir/f.txt"}, {"content", ""}});
  CHECK(has(out.content, "overwrote new/dir/f.txt (0 bytes)"));
  CHECK(slurp(ws / "new/dir/f.txt").empty());

  out = ws.run("write_file", {{"path", "new"}, {"content", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'new' is a directory"));
  CHECK(out.files_changed.empty());

  out = ws.run("write_file", {{"path", "/tmp/child-tools-abs.txt"}, {"content", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "outside the workspace"));
  CHECK_FALSE(fs::exists("/tmp/child-tools-abs.txt"));
}

TEST_CASE("edit_file: missing, non-unique, unique, replace_all") {
  Ws ws;
  put(ws / "f.txt", "alpha\nbeta\nalpha\ngamma\n");

  auto out = ws.run("edit_file", {{"path", "f.txt"}, {"old_string", "delta"}, {"new_string", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "not found in 'f.txt' (0 matches)"));
  CHECK(out.files_changed.empty());

  out = ws.run("edit_file", {{"path", "f.txt"}, {"old_string", "alpha"}, {"new_string", "A"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "matches 2 times in 'f.txt'"));
  CHECK(slurp(ws / "f.txt") == "alpha\nbeta\nalpha\ngamma\n");

  out = ws.run("edit_file", {{"path", "f.txt"}, {"old_string", "alpha\ngamma"}, {"new_string", "omega"}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "replaced 1 occurrence (first at line 3)"));
  CHECK(out.files_changed == std::vector<std::string>{"f.txt"});
  CHECK(slurp(ws / "f.txt") == "alpha\nbeta\nomega\n");

  put(ws / "g.txt", "a a a\n");
  out = ws.run("edit_file", {{"path", "g.txt"}, {"old_string", "a"}, {"new_string", "bb"}, {"replace_all", true}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "replaced 3 occurrences"));
  CHECK(slurp(ws / "g.txt") == "bb bb bb\n");

  out = ws.run("edit_file", {{"path", "g.txt"}, {"old_string", ""}, {"new_string", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'old_string' is empty"));
  out = ws.run("edit_file", {{"path", "nope.txt"}, {"old_string", "a"}, {"new_string", "b"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'nope.txt' does not exist"));

  // Mode is kept: files are rewritten in place.
  put(ws / "run.sh", "echo a\n");
  fs::permissions(ws / "run.sh", fs::perms::owner_all);
  out = ws.run("edit_file", {{"path", "run.sh"}, {"old_string", "a"}, {"new_string", "b"}});
  REQUIRE(out.ok);
  CHECK((fs::status(ws / "run.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
}

TEST_CASE("run_command: exit code, merged output, cwd, cap, timeout") {
  Ws ws;
  auto out = ws.run("run_command", {{"command", "echo out; echo err >&2; pwd; exit 3"}});
  CHECK(out.ok);
  CHECK(out.exit_code == 3);
  CHECK(out.command == "echo out; echo err >&2; pwd; exit 3");
  CHECK(has(out.content, "out\n"));
  CHECK(has(out.content, "err\n"));
  CHECK(has(out.content, ws.dir.path().string() + "\n"));
  CHECK(has(out.content, "[exit code 3, "));

  out = ws.run("run_command", {{"command", "true"}});
  CHECK(out.exit_code == 0);
  CHECK(has(out.content, "(no output)"));

  out = ws.run("run_command", {{"command", "seq 1 100000"}, {"max_output_bytes", 1000}});
  CHECK(out.exit_code == 0);
  CHECK(out.content.rfind("1\n2\n3\n", 0) == 0);
  CHECK(has(out.content, "\n100000\n"));
  CHECK(has(out.content, "bytes of output omitted"));
  CHECK(out.content.size() < 1400);

  auto t0 = std::chrono::steady_clock::now();
  out = ws.run("run_command", {{"command", "echo started; sleep 30; echo never"}, {"timeout_seconds", 1}});
  CHECK(seconds_since(t0) < 5.0);
  CHECK_FALSE(out.ok);
  CHECK(out.exit_code == 124);
  CHECK(has(out.content, "started"));
  CHECK_FALSE(has(out.content, "never"));
  CHECK(has(out.content, "timed out after 1 s"));

  // A background process holding the output pipe does not keep the call alive.
  t0 = std::chrono::steady_clock::now();
  out = ws.run("run_command", {{"command", "sleep 30 & echo done"}});
  CHECK(seconds_since(t0) < 5.0);
  CHECK(out.exit_code == 0);
  CHECK(has(out.content, "done"));

  out = ws.run("run_command", {{"command", "kill -9 $$"}});
  CHECK(out.exit_code == 128 + 9);
  CHECK(has(out.content, "killed by signal 9"));

  out = ws.run("run_command", {{"command", "   "}});
  CHECK_FALSE(out.ok);
  out = ws.run("run_command", {{"command", "true"}, {"timeout_seconds", 0}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "'timeout_seconds'"));
}

TEST_CASE("run_command: the command's process group does not outlive the call") {
  Ws ws;
  auto out = ws.run("run_command", {{"command", "sleep 37 & echo $!"}});
  CHECK(out.exit_code == 0);
  pid_t bg = std::atoi(out.content.c_str());
  REQUIRE(bg > 1);
  CHECK(process_gone(bg));

  out = ws.run("run_command", {{"command", "sleep 38 & echo $!; sleep 30"}, {"timeout_seconds", 1}});
  CHECK(out.exit_code == 124);
  bg = std::atoi(out.content.c_str());
  REQUIRE(bg > 1);
  CHECK(process_gone(bg));

  // The twin: without the cleanup a background sleep is still alive after its shell returns.
  FILE* p = ::popen("sleep 39 >/dev/null 2>&1 & echo $!", "r");
  REQUIRE(p != nullptr);
  char buf[32] = {};
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr);
  ::pclose(p);
  pid_t twin = std::atoi(buf);
  REQUIRE(twin > 1);
  CHECK(::kill(twin, 0) == 0);
  ::kill(twin, SIGKILL);
}

TEST_CASE("FIFOs in the workspace never block a tool") {
  Ws ws;
  REQUIRE(::mkfifo((ws / "fifo").c_str(), 0644) == 0);
  put(ws / "a.txt", "needle\n");
  auto out = ws.run("read_file", {{"path", "fifo"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "not a regular file"));
  out = ws.run("write_file", {{"path", "fifo"}, {"content", "x"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "not a regular file"));
  out = ws.run("edit_file", {{"path", "fifo"}, {"old_string", "a"}, {"new_string", "b"}});
  CHECK_FALSE(out.ok);
  out = ws.run("grep", {{"pattern", "needle"}});
  CHECK(has(out.content, "a.txt:1: needle"));
  out = ws.run("grep", {{"pattern", "needle"}, {"path", "fifo"}});
  CHECK(has(out.content, "no matches"));
  out = ws.run("list_dir", json::object());
  CHECK(has(out.content, "fifo  (special file)"));
}

TEST_CASE("run_command: inherited descriptors do not reach the command") {
  Ws ws;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);  // not close-on-exec, like a protocol pipe could be
  auto out = ws.run("run_command", {{"command", "ls /proc/self/fd | sort -n | tr '\\n' ' '"}});
  ::close(fds[0]);
  ::close(fds[1]);
  // 0, 1, 2 and the fd `ls` opened to read the directory.
  CHECK_FALSE(has(out.content, " " + std::to_string(fds[1]) + " "));
  CHECK(out.content.rfind("0 1 2 ", 0) == 0);
}

TEST_CASE("git views on a temporary repository") {
  Ws ws;
  std::string git = "cd '" + ws.dir.path().string() +
                    "' && GIT_CONFIG_NOSYSTEM=1 HOME=/nonexistent git -c user.name=T -c "
                    "user.email=t@example.com -c init.defaultBranch=main ";
  auto sh = [](const std::string& c) { REQUIRE(std::system((c + " >/dev/null 2>&1").c_str()) == 0); };
  sh(git + "init -q .");
  put(ws / "a.txt", "one\n");
  put(ws / "src/b.txt", "bee\n");
  sh(git + "add -A");
  sh(git + "commit -q -m 'first commit'");
  put(ws / "a.txt", "one\ntwo\n");
  sh(git + "commit -q -am 'second commit'");
  put(ws / "a.txt", "one\ntwo\nthree\n");
  put(ws / "src/b.txt", "bee staged\n");
  sh(git + "add src/b.txt");
  put(ws / "new.txt", "n\n");

  auto out = ws.run("git_status", json::object());
  REQUIRE(out.ok);
  CHECK(has(out.content, "## main"));
  CHECK(has(out.content, " M a.txt"));
  CHECK(has(out.content, "M  src/b.txt"));
  CHECK(has(out.content, "?? new.txt"));

  out = ws.run("git_log", json::object());
  REQUIRE(out.ok);
  CHECK(has(out.content, "T: second commit"));
  CHECK(out.content.find("second commit") < out.content.find("first commit"));
  out = ws.run("git_log", {{"max_count", 1}});
  CHECK_FALSE(has(out.content, "first commit"));
  out = ws.run("git_log", {{"path", "src"}});
  CHECK(has(out.content, "first commit"));
  CHECK_FALSE(has(out.content, "second commit"));

  out = ws.run("git_show", {{"rev", "HEAD"}});
  REQUIRE(out.ok);
  CHECK(has(out.content, "second commit"));
  CHECK(has(out.content, "+two"));
  out = ws.run("git_show", {{"rev", "HEAD~1:a.txt"}});
  REQUIRE(out.ok);
  CHECK(out.content == "one\n");

  out = ws.run("git_diff", json::object());
  REQUIRE(out.ok);
  CHECK(has(out.content, "+three"));
  CHECK_FALSE(has(out.content, "bee staged"));
  out = ws.run("git_diff", {{"staged", true}});
  CHECK(has(out.content, "+bee staged"));
  CHECK_FALSE(has(out.content, "+three"));
  out = ws.run("git_diff", {{"rev", "HEAD~1"}, {"path", "a.txt"}});
  CHECK(has(out.content, "+two"));
  CHECK(has(out.content, "+three"));
  CHECK_FALSE(has(out.content, "bee"));

  // Arguments that could become options or leave the workspace are refused before git runs.
  for (const char* rev : {"--output=/tmp/x", "-p", "HEAD\n--help"}) {
    CAPTURE(rev);
    out = ws.run("git_show", {{"rev", rev}});
    CHECK_FALSE(out.ok);
    out = ws.run("git_diff", {{"rev", rev}});
    CHECK_FALSE(out.ok);
  }
  out = ws.run("git_show", {{"rev", "-p"}});
  CHECK(has(out.content, "may not start with '-'"));
  out = ws.run("git_log", {{"path", "../.."}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "outside the workspace"));

  out = ws.run("git_show", {{"rev", "no-such-rev"}});
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "git show failed"));
}

TEST_CASE("git views: a repository above the workspace is out of scope") {
  Ws ws;
  auto sh = [](const std::string& c) { REQUIRE(std::system((c + " >/dev/null 2>&1").c_str()) == 0); };
  sh("cd '" + ws.dir.path().string() + "' && git init -q .");
  fs::create_directories(ws / "sub");
  child::ToolContext sub = ws.ctx;
  sub.workspace = ws / "sub";
  auto out = child::run_tool("git_status", json::object(), sub);
  CHECK_FALSE(out.ok);
  CHECK(has(out.content, "not a git repository"));
  out = child::run_tool("git_status", json::object(), ws.ctx);  // the twin
  CHECK(out.ok);
}

TEST_CASE("git views: a repository's external diff and pager settings are not used") {
  Ws ws;
  std::string git = "cd '" + ws.dir.path().string() +
                    "' && GIT_CONFIG_NOSYSTEM=1 HOME=/nonexistent git -c user.name=T -c "
                    "user.email=t@example.com ";
  auto sh = [](const std::string& c) { REQUIRE(std::system((c + " >/dev/null 2>&1").c_str()) == 0); };
  sh(git + "init -q .");
  put(ws / "a.txt", "one\n");
  sh(git + "add -A");
  sh(git + "commit -q -m c1");
  const std::string marker = (ws / "ran.marker").string();
  sh(git + "config diff.external 'touch " + marker + "'");
  sh(git + "config core.pager 'touch " + marker + "'");
  sh(git + "config core.fsmonitor 'touch " + marker + "'");
  put(ws / "a.txt", "two\n");
  auto out = ws.run("git_diff", json::object());
  CHECK(out.ok);
  CHECK(has(out.content, "+two"));
  out = ws.run("git_status", json::object());
  CHECK(out.ok);
  out = ws.run("git_show", {{"rev", "HEAD"}});
  CHECK(out.ok);
  CHECK_FALSE(fs::exists(marker));
  // The twin: plain git in this repository does run the external diff.
  sh(git + "diff");
  CHECK(fs::exists(marker));
}
