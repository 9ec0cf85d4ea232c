#include "web/research.hpp"

#include <algorithm>
#include <cstdlib>

#include "policy/decide.hpp"

namespace supervisor {

std::string default_search_endpoint() {
  const char* e = std::getenv("SUBAGENT_SEARCH_ENDPOINT");
  return e ? e : "";
}

std::shared_ptr<WebTools> web_tools_for(boost::asio::io_context& io, const Preset& preset,
                                        const std::optional<std::vector<std::string>>& domains,
                                        const std::string& search_endpoint) {
  const auto tools = offered_tools(preset);
  if (std::find(tools.begin(), tools.end(), "web_fetch") == tools.end() &&
      std::find(tools.begin(), tools.end(), "web_search") == tools.end())
    return nullptr;
  WebToolsConfig c;
  c.allow_domains = domains ? *domains : preset.web.allow_domains;
  c.deny_domains = preset.web.deny_domains;
  c.max_fetch_bytes = preset.web.max_fetch_bytes;
  c.fetch_timeout = std::chrono::milliseconds(preset.web.fetch_timeout_ms);
  c.search_endpoint = search_endpoint;
  return make_web_tools(io, std::move(c));
}

void attach_sources(protocol::Envelope& e, WebTools& web) {
  auto sources = web.sources_json(e.id);
  if (!sources.empty()) e.artifacts["sources"] = std::move(sources);
  web.forget(e.id);
}

}  // namespace supervisor
