// The interface of tools the supervisor runs itself, outside the child's sandbox, on a child's behalf
// (web_tools.hpp: web_fetch and web_search). A session hands such a call to the BrokeredTools its
// config holds instead of to the child.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace supervisor {

// Tools the supervisor runs itself on the child's behalf (web_fetch, web_search).
class BrokeredTools {
 public:
  virtual ~BrokeredTools() = default;
  virtual bool handles(const std::string& tool) const = 0;
  virtual void run(const std::string& child_id, const std::string& tool, const nlohmann::json& args,
                   std::function<void(bool ok, std::string content)> done) = 0;
};

}  // namespace supervisor
