// What web_fetch hands a child for an HTML page: readable text, not markup. Pure: no I/O.
#pragma once

#include <string>

namespace supervisor {

// HTML → readable text (gumbo): script/style/noscript/template/svg skipped, headings kept ("# "),
// link text kept with its absolute http(s) target, block elements on their own lines, whitespace
// collapsed. `base_url` resolves relative links. Sets `title` from <title>.
std::string html_to_text(const std::string& html, const std::string& base_url, std::string& title);

}  // namespace supervisor
