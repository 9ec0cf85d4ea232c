// libcurl's URL handle, owned (the web library's own: html_text.cpp and web_tools.cpp).
#pragma once

#include <curl/curl.h>

#include <string>

namespace supervisor::web_detail {

struct CurlUrl {
  CURLU* h = curl_url();
  ~CurlUrl() { curl_url_cleanup(h); }
  CurlUrl() = default;
  CurlUrl(const CurlUrl&) = delete;
  CurlUrl& operator=(const CurlUrl&) = delete;
  std::string get(CURLUPart part, unsigned flags = 0) const {
    char* s = nullptr;
    if (curl_url_get(h, part, &s, flags) != CURLUE_OK || !s) return "";
    std::string out = s;
    curl_free(s);
    return out;
  }
};

}  // namespace supervisor::web_detail
