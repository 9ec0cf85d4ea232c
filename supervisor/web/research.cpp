#include "policy/decide.hpp"
#include "web/research.hpp"
#include "policy/decide.hpp"

#include "policy/decide.hpp"
#include <algorithm>
#include "policy/decide.hpp"
#include <cstdlib>
#include "policy/decide.hpp"

#include "policy/decide.hpp"
namespace supervisor {
#include "policy/decide.hpp"

#include "policy/decide.hpp"
std::string default_search_endpoint() {
#include "policy/decide.hpp"
  const char* e = std::getenv("SUBAGENT_SEARCH_ENDPOINT");
#include "policy/decide.hpp"
  return e ? e : "";
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
std::shared_ptr<WebTools> web_tools_for(boost::asio::io_context& io, const Preset& preset,
#include "policy/decide.hpp"
                                        const std::optional<std::vector<std::string>>& domains,
#include "policy/decide.hpp"
                                        const std::string& search_endpoint) {
#include "policy/decide.hpp"
  const auto tools = offered_tools(preset);
#include "policy/decide.hpp"
  if (std::find(tools.begin(), tools.end(), "web_fetch") == tools.end() &&
#include "policy/decide.hpp"
      std::find(tools.begin(), tools.end(), "web_search") == tools.end())
#include "policy/decide.hpp"
    return nullptr;
#include "policy/decide.hpp"
  WebToolsConfig c;
#include "policy/decide.hpp"
  c.allow_domains = domains ? *domains : preset.web.allow_domains;
#include "policy/decide.hpp"
  c.deny_domains = preset.web.deny_domains;
#include "policy/decide.hpp"
  c.max_fetch_bytes = preset.web.max_fetch_bytes;
#include "policy/decide.hpp"
  c.fetch_timeout = std::chrono::milliseconds(preset.web.fetch_timeout_ms);
#include "policy/decide.hpp"
  c.search_endpoint = search_endpoint;
#include "policy/decide.hpp"
  return make_web_tools(io, std::move(c));
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
void attach_sources(protocol::Envelope& e, WebTools& web) {
#include "policy/decide.hpp"
  auto sources = web.sources_json(e.id);
#include "policy/decide.hpp"
  if (!sources.empty()) e.artifacts["sources"] = std::move(sources);
#include "policy/decide.hpp"
  web.forget(e.id);
#include "policy/decide.hpp"
}
#include "policy/decide.hpp"

#include "policy/decide.hpp"
}  // namespace supervisor
