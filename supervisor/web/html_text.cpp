// HTML to readable text with gumbo (web/html_text.hpp).
#include "web/html_text.hpp"

#include <curl/curl.h>
#include <gumbo.h>

#include "curl_url.hpp"
#include "net/http.hpp"

namespace supervisor {

using web_detail::CurlUrl;

namespace {

// `ref` resolved against `base`; "" unless the result is http(s).
std::string resolve(const std::string& base, const std::string& ref) {
  CurlUrl u;
  if (!base.empty() && curl_url_set(u.h, CURLUPART_URL, base.c_str(), 0) != CURLUE_OK) return "";
  if (curl_url_set(u.h, CURLUPART_URL, ref.c_str(), 0) != CURLUE_OK) return "";
  std::string scheme = u.get(CURLUPART_SCHEME);
  if (scheme != "http" && scheme != "https") return "";
  return u.get(CURLUPART_URL);
}

class TextBuilder {
 public:
  explicit TextBuilder(std::string base) : base_(std::move(base)) {}

  void walk(const GumboNode* n, int depth) {
    if (depth > 400 || out_.size() > kMax) return;  // pathological nesting or size: stop descending
    switch (n->type) {
      case GUMBO_NODE_TEXT:
      case GUMBO_NODE_CDATA:
      case GUMBO_NODE_WHITESPACE:
        text(n->v.text.text);
        return;
      case GUMBO_NODE_ELEMENT:
      case GUMBO_NODE_TEMPLATE:
        element(n, depth);
        return;
      case GUMBO_NODE_DOCUMENT:
        children(&n->v.document.children, depth);
        return;
      default:
        return;  // comments
    }
  }

  std::string take() {
    while (!out_.empty() && (out_.back() == ' ' || out_.back() == '\n')) out_.pop_back();
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kMax = 8u << 20;

  void children(const GumboVector* v, int depth) {
    for (unsigned i = 0; i < v->length; ++i) walk(static_cast<const GumboNode*>(v->data[i]), depth + 1);
  }

  void element(const GumboNode* n, int depth) {
    const GumboElement& e = n->v.element;
    switch (e.tag) {
      case GUMBO_TAG_SCRIPT:
      case GUMBO_TAG_STYLE:
      case GUMBO_TAG_NOSCRIPT:
      case GUMBO_TAG_TEMPLATE:
      case GUMBO_TAG_SVG:
      case GUMBO_TAG_MATH:
      case GUMBO_TAG_IFRAME:
      case GUMBO_TAG_OBJECT:
      case GUMBO_TAG_EMBED:
      case GUMBO_TAG_CANVAS:
      case GUMBO_TAG_HEAD:
      case GUMBO_TAG_SELECT:
        return;
      case GUMBO_TAG_BR:
        newline(1);
        return;
      case GUMBO_TAG_HR:
        newline(2);
        return;
      case GUMBO_TAG_IMG:
        if (const GumboAttribute* alt = gumbo_get_attribute(&e.attributes, "alt"); alt && *alt->value) {
          text("[image: ");
          text(alt->value);
          text("]");
        }
        return;
      default:
        break;
    }
    int heading = 0;
    switch (e.tag) {
      case GUMBO_TAG_H1:
        heading = 1;
        break;
      case GUMBO_TAG_H2:
        heading = 2;
        break;
      case GUMBO_TAG_H3:
        heading = 3;
        break;
      case GUMBO_TAG_H4:
        heading = 4;
        break;
      case GUMBO_TAG_H5:
        heading = 5;
        break;
      case GUMBO_TAG_H6:
        heading = 6;
        break;
      default:
        break;
    }
    if (heading) {
      newline(2);
      raw(std::string(heading, '#') + " ");
      children(&e.children, depth);
      newline(2);
      return;
    }
    if (e.tag == GUMBO_TAG_A) {
      const std::size_t before = out_.size();
      children(&e.children, depth);
      const GumboAttribute* href = gumbo_get_attribute(&e.attributes, "href");
      if (href && *href->value && href->value[0] != '#') {
        std::string target = resolve(base_, href->value);
        std::string shown = out_.substr(before);
        if (!target.empty() && shown.find(target) == std::string::npos && target.size() < 500)
          text(" (" + target + ")");
      }
      return;
    }
    if (e.tag == GUMBO_TAG_PRE) {
      newline(2);
      ++pre_;
      children(&e.children, depth);
      --pre_;
      newline(2);
      return;
    }
    if (e.tag == GUMBO_TAG_LI) {
      newline(1);
      raw("- ");
      children(&e.children, depth);
      newline(1);
      return;
    }
    if (e.tag == GUMBO_TAG_TD || e.tag == GUMBO_TAG_TH) {
      space_ = true;
      children(&e.children, depth);
      text(" |");
      return;
    }
    const int block = block_lines(e.tag);
    if (block) newline(block);
    children(&e.children, depth);
    if (block) newline(block);
  }

  static int block_lines(GumboTag t) {
    switch (t) {
      case GUMBO_TAG_P:
      case GUMBO_TAG_BLOCKQUOTE:
      case GUMBO_TAG_TABLE:
      case GUMBO_TAG_UL:
      case GUMBO_TAG_OL:
      case GUMBO_TAG_DL:
      case GUMBO_TAG_FIGURE:
      case GUMBO_TAG_SECTION:
      case GUMBO_TAG_ARTICLE:
        return 2;
      case GUMBO_TAG_DIV:
      case GUMBO_TAG_TR:
      case GUMBO_TAG_DT:
      case GUMBO_TAG_DD:
      case GUMBO_TAG_HEADER:
      case GUMBO_TAG_FOOTER:
      case GUMBO_TAG_MAIN:
      case GUMBO_TAG_NAV:
      case GUMBO_TAG_ASIDE:
      case GUMBO_TAG_FORM:
      case GUMBO_TAG_FIGCAPTION:
      case GUMBO_TAG_ADDRESS:
      case GUMBO_TAG_CAPTION:
      case GUMBO_TAG_BODY:
      case GUMBO_TAG_DETAILS:
      case GUMBO_TAG_SUMMARY:
        return 1;
      default:
        return 0;
    }
  }

  void newline(int n) {
    if (out_.empty()) return;
    lines_ = std::max(lines_, n);
    space_ = false;
  }

  void flush() {
    if (lines_) {
      while (!out_.empty() && out_.back() == ' ') out_.pop_back();
      int have = 0;
      for (auto it = out_.rbegin(); it != out_.rend() && *it == '\n' && have < 2; ++it) ++have;
      for (int i = have; i < lines_; ++i) out_.push_back('\n');
      lines_ = 0;
    } else if (space_ && !out_.empty() && out_.back() != '\n' && out_.back() != ' ') {
      out_.push_back(' ');
    }
    space_ = false;
  }

  void raw(const std::string& s) {
    flush();
    out_ += s;
  }

  void text(const char* s) { text(std::string_view(s)); }
  void text(std::string_view s) {
    if (pre_) {
      flush();
      out_.append(s);
      return;
    }
    for (char c : s) {
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f') {
        space_ = true;
        continue;
      }
      flush();
      out_.push_back(c);
    }
  }

  std::string base_;
  std::string out_;
  int lines_ = 0;
  bool space_ = false;
  int pre_ = 0;
};

const GumboNode* find_tag(const GumboNode* n, GumboTag tag, int depth) {
  if (depth > 50 || n->type != GUMBO_NODE_ELEMENT) {
    if (n->type != GUMBO_NODE_DOCUMENT) return nullptr;
  }
  if (n->type == GUMBO_NODE_ELEMENT && n->v.element.tag == tag) return n;
  const GumboVector* kids = n->type == GUMBO_NODE_DOCUMENT ? &n->v.document.children : &n->v.element.children;
  for (unsigned i = 0; i < kids->length; ++i)
    if (auto* f = find_tag(static_cast<const GumboNode*>(kids->data[i]), tag, depth + 1)) return f;
  return nullptr;
}

}  // namespace

std::string html_to_text(const std::string& html, const std::string& base_url, std::string& title) {
  GumboOutput* out = gumbo_parse_with_options(&kGumboDefaultOptions, html.data(), html.size());
  title.clear();
  std::string base = base_url;
  if (const GumboNode* t = find_tag(out->document, GUMBO_TAG_TITLE, 0)) {
    TextBuilder tb("");
    for (unsigned i = 0; i < t->v.element.children.length; ++i)
      tb.walk(static_cast<const GumboNode*>(t->v.element.children.data[i]), 0);
    title = http::printable(tb.take(), 300);
  }
  if (const GumboNode* b = find_tag(out->document, GUMBO_TAG_BASE, 0))
    if (const GumboAttribute* href = gumbo_get_attribute(&b->v.element.attributes, "href"))
      if (std::string r = resolve(base_url, href->value); !r.empty()) base = r;
  TextBuilder tb(base);
  tb.walk(out->document, 0);
  gumbo_destroy_output(&kGumboDefaultOptions, out);
  return tb.take();
}

}  // namespace supervisor
