// Which addresses are not public (web/address_filter.hpp).
#include "web/address_filter.hpp"

#include <cstdint>

namespace supervisor {

namespace ip = boost::asio::ip;

namespace {

std::optional<std::string> v4_reason(std::uint32_t a) {
  auto in = [a](std::uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  if (a == 0xA9FEA9FE) return "is the cloud metadata address";  // 169.254.169.254
  if (in(0x00000000, 8)) return "is unspecified (0.0.0.0/8)";
  if (in(0x7F000000, 8)) return "is loopback";
  if (in(0x0A000000, 8) || in(0xAC100000, 12) || in(0xC0A80000, 16)) return "is private (RFC 1918)";
  if (in(0x64400000, 10)) return "is shared address space (CGNAT, 100.64.0.0/10)";
  if (in(0xA9FE0000, 16)) return "is link-local";
  if (in(0xC0000000, 24)) return "is reserved (192.0.0.0/24)";
  if (in(0xC0000200, 24) || in(0xC6336400, 24) || in(0xCB007100, 24)) return "is a documentation address";
  if (in(0xC6120000, 15)) return "is a benchmarking address (198.18.0.0/15)";
  if (in(0xE0000000, 4)) return "is multicast";
  if (in(0xF0000000, 4)) return "is reserved or broadcast (240.0.0.0/4)";
  return std::nullopt;
}

std::uint32_t v4_at(const ip::address_v6::bytes_type& b, int off) {
  return (std::uint32_t(b[off]) << 24) | (std::uint32_t(b[off + 1]) << 16) | (std::uint32_t(b[off + 2]) << 8) |
         b[off + 3];
}

std::optional<std::string> v6_reason(const ip::address_v6& a) {
  const auto b = a.to_bytes();
  auto prefix = [&b](std::initializer_list<unsigned> p, int bits) {
    int i = 0;
    for (unsigned byte : p) {
      int take = std::min(8, bits - i * 8);
      if (take <= 0) break;
      unsigned mask = (0xFFu << (8 - take)) & 0xFFu;
      if ((b[i] & mask) != (byte & mask)) return false;
      ++i;
    }
    return true;
  };
  if (a.is_unspecified()) return "is unspecified (::)";
  if (a.is_loopback()) return "is loopback";
  if (a.is_v4_mapped()) {
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds an IPv4 address that " + *r;
    return std::nullopt;
  }
  if (prefix({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {  // IPv4-compatible (deprecated)
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds an IPv4 address that " + *r;
  }
  if (prefix({0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0}, 96)) {  // NAT64
    if (auto r = v4_reason(v4_at(b, 12))) return "embeds (NAT64) an IPv4 address that " + *r;
  }
  if (prefix({0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48)) return "is local-use NAT64 (64:ff9b:1::/48)";
  if (prefix({0x20, 0x02}, 16)) {  // 6to4
    if (auto r = v4_reason(v4_at(b, 2))) return "embeds (6to4) an IPv4 address that " + *r;
  }
  if (prefix({0x20, 0x01, 0x00, 0x00}, 32)) return "is Teredo (2001::/32), which hides the real address";
  if (prefix({0x20, 0x01, 0x0d, 0xb8}, 32)) return "is a documentation address";
  if (prefix({0x01, 0x00, 0, 0, 0, 0, 0, 0}, 64)) return "is a discard-only address (100::/64)";
  if (prefix({0xfd, 0x00, 0x0e, 0xc2}, 32) && v4_at(b, 4) == 0 && v4_at(b, 8) == 0 && v4_at(b, 12) == 0x254)
    return "is the cloud metadata address";
  if (prefix({0xfc}, 7)) return "is unique-local (fc00::/7, private)";
  if (prefix({0xfe, 0x80}, 10)) return "is link-local";
  if (prefix({0xfe, 0xc0}, 10)) return "is site-local (deprecated, private)";
  if (prefix({0xff}, 8)) return "is multicast";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> non_public_reason(const ip::address& a) {
  if (a.is_v4()) return v4_reason(a.to_v4().to_uint());
  return v6_reason(a.to_v6());
}

}  // namespace supervisor
