// Wiring of the brokered web tools (web_fetch, web_search) for presets that offer them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "protocol/envelope.hpp"
#include "policy/preset.hpp"
#include "web/web_tools.hpp"

namespace supervisor {

// Web tools configured from the preset's "web" section, narrowed to `domains` when the spawn gave
// some; null when the preset offers neither web tool. The search endpoint comes from
// --search-endpoint or $SUBAGENT_SEARCH_ENDPOINT (empty: web_search reports it is unavailable).
std::shared_ptr<WebTools> web_tools_for(boost::asio::io_context& io, const Preset& preset,
                                        const std::optional<std::vector<std::string>>& domains,
                                        const std::string& search_endpoint);

// Adds the child's cited sources ({url, title, fetched_at}) to the envelope's artifacts and lets the
// web tools forget the child.
void attach_sources(protocol::Envelope& e, WebTools& web);

std::string default_search_endpoint();

}  // namespace supervisor
