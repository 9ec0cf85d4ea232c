// The MCP front end as a careless or hostile client writes it: bytes split into lines as ParentIo does,
// each line through mcp::decode_line, then every tool's argument parser on the params' arguments.
//
// Properties: decoding never throws and classifies every line; an Invalid message has a JSON-RPC
// error code and a message, and its id is null or a legal id; a Request's id is a string or an
// integer and its params are an object or null; the argument parsers throw nothing but BadRequest
// (with a message); a wait is within the documented maximum; a parsed spawn has a preset, a brief
// and a description.
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "protocol/framing.hpp"
#include "frontends/control.hpp"
#include "frontends/mcp.hpp"

namespace {

using nlohmann::json;
namespace mcp = supervisor::mcp;

bool legal_id(const json& id) { return id.is_string() || id.is_number_integer(); }

template <class F>
void expect_bad_request_only(F&& f) {
  fuzz::only_throws<supervisor::BadRequest>(f);
}

void tool_arguments(const json& args) {
  expect_bad_request_only([&] {
    auto a = mcp::parse_spawn_arguments(args);
    FUZZ_CHECK(!a.request.preset.empty() || args.at("preset") == "");
    FUZZ_CHECK(!a.request.brief.empty());
    FUZZ_CHECK(!a.request.description.empty());
  });
  expect_bad_request_only([&] { FUZZ_CHECK(!mcp::parse_child_id(args, {"reason", "wait_seconds"}).empty()); });
  expect_bad_request_only([&] { FUZZ_CHECK(mcp::parse_wait_seconds(args) <= mcp::kMaxWaitSeconds); });
  expect_bad_request_only([&] { mcp::parse_no_arguments(args); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  protocol::LineReader reader(64 * 1024);
  std::vector<protocol::Frame> frames;
  reader.feed(std::string_view(reinterpret_cast<const char*>(data), size), frames);
  reader.finish(frames);
  for (const auto& f : frames) {
    if (f.error != protocol::FrameError::none) continue;
    mcp::Message m = mcp::decode_line(f.line);
    if (auto* inv = std::get_if<mcp::Invalid>(&m)) {
      FUZZ_CHECK(inv->code <= -32600 && inv->code >= -32700);
      FUZZ_CHECK(!inv->message.empty());
      FUZZ_CHECK(inv->id.is_null() || legal_id(inv->id));
      // The answer to it is itself one JSON line.
      FUZZ_CHECK(mcp::error_message(inv->id, inv->code, inv->message).dump().find('\n') == std::string::npos);
    } else if (auto* r = std::get_if<mcp::Request>(&m)) {
      FUZZ_CHECK(legal_id(r->id));
      FUZZ_CHECK(r->params.is_null() || r->params.is_object());
      if (r->params.is_object() && r->params.contains("arguments")) tool_arguments(r->params["arguments"]);
      (void)mcp::negotiate_version(r->params.is_object() && r->params.contains("protocolVersion")
                                       ? r->params["protocolVersion"]
                                       : json(nullptr));
    } else if (auto* n = std::get_if<mcp::Notification>(&m)) {
      FUZZ_CHECK(n->params.is_null() || n->params.is_object());
    } else if (auto* resp = std::get_if<mcp::Response>(&m)) {
      FUZZ_CHECK(legal_id(resp->id));
      FUZZ_CHECK(resp->result.is_null() != resp->error.is_null() || resp->result.is_null());
    }
  }
  return 0;
}
