#include "records/terminal.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <vector>

namespace supervisor {
namespace {

void append_u(std::string& out, std::uint32_t cp) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
  out += buf;
}

void append_x(std::string& out, unsigned char byte) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(byte));
  out += buf;
}

// The length of the UTF-8 sequence at s[i] and its code point, or 0 when it is not valid UTF-8
// (overlong forms, surrogates and values past U+10FFFF included).
std::size_t decode(std::string_view s, std::size_t i, std::uint32_t* cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n;
  std::uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xe0) == 0xc0) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

bool acts_on_terminal(std::uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string escape_for_terminal(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = decode(text, i, &cp);
    if (n == 0) {
      append_x(out, static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    if (acts_on_terminal(cp) && cp != '\t' && !(keep_newlines && cp == '\n'))
      append_u(out, cp);
    else
      out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

bool is_terminal(std::FILE* stream) { return ::isatty(::fileno(stream)) == 1; }

void write_for_terminal(std::FILE* stream, std::string_view text) {
  if (is_terminal(stream)) {
    const std::string safe = escape_for_terminal(text, true);
    std::fwrite(safe.data(), 1, safe.size(), stream);
  } else {
    std::fwrite(text.data(), 1, text.size(), stream);
  }
}

void print_for_terminal(std::FILE* stream, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n < 0) {
    va_end(again);
    return;
  }
  std::vector<char> buf(static_cast<std::size_t>(n) + 1);
  std::vsnprintf(buf.data(), buf.size(), format, again);
  va_end(again);
  write_for_terminal(stream, std::string_view(buf.data(), static_cast<std::size_t>(n)));
}

}  // namespace supervisor
