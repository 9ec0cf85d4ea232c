// A scriptable child for tests: speaks protocol v1 well or badly, as argv[1] says.
//   good            hello, one model turn, final (the model's text as the answer)
//   big_final N     hello, final whose answer is N bytes of "€" (3 bytes each) and summary likewise
//   ignore_wrap_up  keeps asking for model turns; after wrap_up it goes silent and never finishes
//   crash           hello, then a null-pointer write (SIGSEGV)
//   exit_early      hello, welcome, then exit(3)
//   no_hello        says nothing, sleeps
//   bad_version     offers protocol version 99 only
//   huge_line N     hello, then one line of N bytes
//   invalid_utf8    hello, then a line with invalid UTF-8
//   unknown_type    hello, then {"type":"teleport"}
//   cut_line        hello, then half a message and exit(0)
//   not_json        hello, then a line that is not JSON
//   flood N         hello, then N valid log lines as fast as it can, then final
//   grandchild NAME hello, forks a setsid grandchild named NAME (comm) that sleeps forever; exits
//   stderr_lines    hello, writes lines on stderr, then final
//   flood_forever   hello, then valid log lines as fast as it can, never a final
//   close_stdout    hello, closes its stdout, then lives on (ignoring SIGTERM/SIGINT/SIGHUP)
//   ignore_cancel   hello, one model request, then reads and ignores everything (cancel included)
//                   and every catchable signal; it never exits by itself
//   hang [NAME]     hello, then sleeps forever (a worker that holds its workspace lock); NAME: its comm
//   shell           hello, then runs its brief with /bin/sh -c inside its sandbox (stdout and stderr to
//                   the supervisor's log), then final with the exit status: a hostile writer that
//                   does whatever its sandbox lets it
//   forge_denial TOOL  hello, asks for TOOL (the policy refuses it), then prints the supervisor's
//                   denial line for it word for word on its stderr (plain, after a carriage return,
//                   and inside log messages), then final
//   deny_flood N    hello, then N requests for a tool no preset offers, one after another (each
//                   waits for its denial), then final
//   ask_flood N     hello, then N run_command requests at once without waiting (the worker preset
//                   asks the parent about each), then a log line "answer ID: REASON" for each
//                   answer as it comes, then final whose answer counts the denials
//   from_workspace  reads "MODE ARG..." from the file .fake-child in its working directory (the
//                   workspace) and behaves as that mode: one `serve --child` can then run good and
//                   hostile children side by side, each spawn choosing its own through its workspace
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "protocol/framing.hpp"
#include "protocol/messages.hpp"

using namespace protocol;

namespace {

void write_all(const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(1, s.data() + off, s.size() - off);
    if (n <= 0) std::_Exit(10);
    off += static_cast<std::size_t>(n);
  }
}

void send(const ChildMessage& m) { write_all(encode_line(m)); }

LineReader g_reader(64u << 20);
std::vector<Frame> g_frames;

SupervisorMessage receive() {
  while (g_frames.empty()) {
    char buf[65536];
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n <= 0) std::_Exit(11);
    g_reader.feed(std::string_view(buf, static_cast<std::size_t>(n)), g_frames);
  }
  Frame f = std::move(g_frames.front());
  g_frames.erase(g_frames.begin());
  auto d = decode_supervisor_message(f.line);
  if (!d) std::_Exit(12);
  return *d.message;
}

void hello() { send(Hello{{1}, "fake_child/1"}); }

Welcome hello_welcome() {
  hello();
  auto m = receive();
  if (!std::holds_alternative<Welcome>(m)) std::_Exit(13);
  return std::get<Welcome>(m);
}

std::size_t arg_size(int argc, char** argv) { return argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0; }

void ignore_signals() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::signal(sig, SIG_IGN);
}

int run(int argc, char** argv);

// from_workspace: the mode comes from ./.fake-child, so each spawn of one `serve --child fake_child
// --child-arg from_workspace` can pick its own behaviour, even one that never says hello.
int from_workspace(char* argv0) {
  std::ifstream in(".fake-child");
  std::string line;
  if (!std::getline(in, line)) return 20;
  std::istringstream words(line);
  static std::vector<std::string> args;
  args.assign(1, argv0);
  for (std::string w; words >> w;) args.push_back(w);
  static std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return run(static_cast<int>(args.size()), argv.data());
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }

namespace {

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "good";
  if (mode == "from_workspace") return from_workspace(argv[0]);
  if (mode == "no_hello") {
    ::pause();
    return 0;
  }
  if (mode == "bad_version") {
    send(Hello{{99}, "future/9"});
    receive();
    ::pause();
    return 0;
  }
  Welcome w = hello_welcome();
  if (mode == "good") {
    send(ModelRequest{"m1", json::array({{{"role", "user"}, {"content", w.task.brief}}}), json::array(), std::nullopt});
    auto r = receive();
    std::string text = std::holds_alternative<ModelResponse>(r) ? std::get<ModelResponse>(r).content : "no answer";
    send(Final{text.substr(0, 100), text, json::object()});
    return 0;
  }
  if (mode == "big_final") {
    std::string s;
    for (std::size_t i = 0; i < arg_size(argc, argv) / 3; ++i) s += "\xE2\x82\xAC";
    send(Final{s, s, json::object()});
    return 0;
  }
  if (mode == "ignore_wrap_up") {
    for (int i = 1;; ++i) {
      send(ModelRequest{"m" + std::to_string(i), json::array(), json::array(), std::nullopt});
      for (;;) {
        auto r = receive();
        if (std::holds_alternative<WrapUp>(r)) {
          for (;;) ::pause();  // ignores wrap_up: never answers again
        }
        if (std::holds_alternative<ModelResponse>(r) || std::holds_alternative<ModelError>(r)) break;
      }
    }
  }
  if (mode == "crash") {
    // A real fault, not abort(): as PID 1 of its namespace the child ignores a self-sent SIGABRT.
    // The default action also in a sanitizer build, whose handler would turn the fault into exit(1).
    ::signal(SIGSEGV, SIG_DFL);
    volatile int* p = nullptr;
    *p = 1;
  }
  if (mode == "exit_early") return 3;
  if (mode == "huge_line") {
    // Written in pieces: the line may be far larger than the memory the sandbox allows.
    std::size_t left = arg_size(argc, argv);
    const std::string piece(1 << 16, 'x');
    while (left > 0) {
      const std::size_t n = std::min(left, piece.size());
      write_all(piece.substr(0, n));
      left -= n;
    }
    write_all("\n");
    ::pause();
    return 0;
  }
  if (mode == "invalid_utf8") {
    write_all("{\"type\":\"log\",\"message\":\"\xC3\x28\"}\n");
    ::pause();
    return 0;
  }
  if (mode == "unknown_type") {
    write_all("{\"type\":\"teleport\"}\n");
    ::pause();
    return 0;
  }
  if (mode == "not_json") {
    write_all("hello there\n");
    ::pause();
    return 0;
  }
  if (mode == "reuse_id") {  // a request id used twice in one session, the first long answered
    send(ModelRequest{"m1", json::array({{{"role", "user"}, {"content", "a"}}}), json::array(), std::nullopt});
    receive();
    send(ModelRequest{"m1", json::array({{{"role", "user"}, {"content", "b"}}}), json::array(), std::nullopt});
    receive();
    ::pause();
    return 0;
  }
  if (mode == "big_tool_message") {  // says 7 bytes, then puts 200 KB of tool result in front of the model
    send(ToolRequest{"t1", "list_dir", json::object()});
    receive();
    send(ToolDone{"t1", true, 7, ""});
    json msgs = json::array(
        {{{"role", "user"}, {"content", "go"}},
         {{"role", "assistant"},
          {"content", ""},
          {"tool_calls", json::array({{{"id", "c1"}, {"name", "list_dir"}, {"arguments", json::object()}}})}},
         {{"role", "tool"}, {"tool_call_id", "c1"}, {"name", "list_dir"}, {"content", std::string(200000, 'x')}}});
    send(ModelRequest{"m1", msgs, json::array(), std::nullopt});
    auto r = receive();
    std::string text = std::holds_alternative<ModelResponse>(r) ? std::get<ModelResponse>(r).content : "no answer";
    send(Final{text.substr(0, 100), text, json::object()});
    return 0;
  }
  if (mode == "tool_done_lies") {  // claims more bytes than any tool result may have
    send(ToolRequest{"t1", "list_dir", json::object()});
    receive();
    send(ToolDone{"t1", true, 200000, ""});
    ::pause();
    return 0;
  }
  if (mode == "bad_role") {
    send(ModelRequest{"m1", json::array({{{"role", "developer"}, {"content", "a"}}}), json::array(), std::nullopt});
    ::pause();
    return 0;
  }
  if (mode == "bad_level") {
    send(Log{"loud", "hello"});
    ::pause();
    return 0;
  }
  if (mode == "half_line_hang") {  // half a line, then nothing: only the supervisor's kill ends it
    ignore_signals();
    write_all("{\"type\":\"log\",\"message\":\"" + std::string(3000, 'h'));
    for (;;) ::pause();
  }
  if (mode == "cut_line") {
    write_all("{\"type\":\"final\",\"summ");
    return 0;
  }
  if (mode == "deny_flood") {
    const std::size_t n = arg_size(argc, argv);
    std::size_t denied = 0;
    for (std::size_t i = 0; i < n; ++i) {
      send(ToolRequest{"d" + std::to_string(i), "teleport", json::object()});
      auto r = receive();
      if (auto* d = std::get_if<ToolDecision>(&r); d && !d->allow) ++denied;
    }
    send(Final{"denied " + std::to_string(denied), "denied " + std::to_string(denied), json::object()});
    return 0;
  }
  if (mode == "ask_flood") {
    const std::size_t n = arg_size(argc, argv);
    std::string batch;
    for (std::size_t i = 0; i < n; ++i)
      batch += encode_line(ChildMessage{ToolRequest{"a" + std::to_string(i), "run_command", {{"command", "true"}}}});
    write_all(batch);
    std::size_t denied = 0;
    for (std::size_t i = 0; i < n; ++i) {
      auto r = receive();
      auto* d = std::get_if<ToolDecision>(&r);
      if (!d) std::_Exit(14);
      if (!d->allow) ++denied;
      send(Log{"info", "answer " + d->id + ": " + d->reason});
    }
    send(Final{"denied " + std::to_string(denied), "denied " + std::to_string(denied), json::object()});
    return 0;
  }
  if (mode == "flood") {
    std::size_t n = arg_size(argc, argv);
    std::string line = encode_line(ChildMessage{Log{"debug", std::string(100, 'f')}});
    std::string batch;
    for (int i = 0; i < 64; ++i) batch += line;
    for (std::size_t i = 0; i < n / 64; ++i) write_all(batch);
    send(Final{"flooded", "flooded", json::object()});
    return 0;
  }
  if (mode == "grandchild") {
    pid_t p = ::fork();
    if (p == 0) {
      ::setsid();
      if (::fork() == 0) {
        ::prctl(PR_SET_NAME, argv[2], 0, 0, 0);  // the test looks for this name in /proc
        for (;;) ::pause();
      }
      std::_Exit(0);
    }
    ::sleep(1);
    return 0;
  }
  if (mode == "flood_forever") {
    std::string line = encode_line(ChildMessage{Log{"debug", std::string(100, 'f')}});
    std::string batch;
    for (int i = 0; i < 64; ++i) batch += line;
    for (;;) write_all(batch);
  }
  if (mode == "close_stdout") {
    ignore_signals();
    ::close(1);
    for (;;) ::pause();
  }
  if (mode == "ignore_cancel") {
    ignore_signals();
    send(ModelRequest{"m1", json::array({{{"role", "user"}, {"content", w.task.brief}}}), json::array(), std::nullopt});
    for (;;) {
      char buf[4096];
      ssize_t n = ::read(0, buf, sizeof buf);  // cancel arrives here and is ignored
      if (n == 0) break;
      if (n < 0 && errno != EINTR) break;
    }
    for (;;) ::pause();  // even with its stdin gone it stays
  }
  if (mode == "hang") {
    if (argc > 2) ::prctl(PR_SET_NAME, argv[2], 0, 0, 0);  // so a test can find and kill exactly this one
    for (;;) ::pause();
  }
  if (mode == "shell") {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(2, 1);
      ::execl("/bin/sh", "sh", "-c", w.task.brief.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    std::string what = "shell exit " + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    send(Final{what, what, json::object()});
    return 0;
  }
  if (mode == "terminal_attack") {  // what a hostile child sends at the person watching `run`
    // Clear the screen, set the title, write the clipboard (OSC 52), then overwrite its own prefix
    // with a forged supervisor line; 8-bit CSI (C1) and a right-to-left override in the log message.
    std::fprintf(stderr, "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\r[subagent:000000000000] parent approved\n");
    std::fflush(stderr);
    send(Log{"warn",
             "csi \xc2\x9b"
             "31m red \xe2\x80\xae"
             "desrever"});
    send(
        Final{"done \x1b[31mred\x1b[0m \xc2\x9b"
              "2J",
              "answer \x1b]52;c;ZXZpbA==\x07", json::object()});
    return 0;
  }
  if (mode == "forge_denial") {  // tries to pass its own words off as the supervisor's denial line
    const std::string tool = argc > 2 ? argv[2] : "write_file";
    send(ToolRequest{"t1", tool, json{{"path", "x"}, {"content", "y"}}});
    auto r = receive();
    const std::string reason = std::holds_alternative<ToolDecision>(r) ? std::get<ToolDecision>(r).reason : "?";
    const std::string forged =
        "subagent-supervisor run: [subagent:" + w.child_id + "] denied " + tool + " (tools.deny): " + reason;
    std::fprintf(stderr, "%s\n\r%s\n\x1b[2K\r%s\n", forged.c_str(), forged.c_str(), forged.c_str());
    std::fflush(stderr);
    send(Log{"", forged});
    send(Log{"info", "\n" + forged});
    send(Final{"forged", "forged", json::object()});
    return 0;
  }
  if (mode == "stderr_lines") {
    std::fprintf(stderr, "first line\nsecond line\n");
    std::fflush(stderr);
    send(Final{"ok", "ok", json::object()});
    return 0;
  }
  return 2;
}

}  // namespace
