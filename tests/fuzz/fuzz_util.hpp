// Helpers shared by the fuzz targets: a byte reader that turns the fuzzer's input into choices, and a
// check that aborts (so libFuzzer records the input) with a message naming the broken property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace fuzz {

// Consumes choices from the front of the input; the rest is the payload.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : s_(reinterpret_cast<const char*>(data), size) {}
  std::uint8_t byte() {
    if (s_.empty()) return 0;
    auto b = static_cast<std::uint8_t>(s_.front());
    s_.remove_prefix(1);
    return b;
  }
  std::string_view rest() const { return s_; }

 private:
  std::string_view s_;
};

[[noreturn]] inline void broken(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: property broken: %s\n", file, line, what);
  std::abort();
}

// Runs `f`; the only exception it may throw is `Expected`, with a message. Anything else escaping
// is a finding (libFuzzer reports the uncaught exception).
template <class Expected, class F>
void only_throws(F&& f) {
  try {
    f();
  } catch (const Expected& e) {
    if (*e.what() == '\0') broken("an error without a message", __FILE__, __LINE__);
  }
}

}  // namespace fuzz

#define FUZZ_CHECK(cond)                                    \
  do {                                                      \
    if (!(cond)) ::fuzz::broken(#cond, __FILE__, __LINE__); \
  } while (0)
