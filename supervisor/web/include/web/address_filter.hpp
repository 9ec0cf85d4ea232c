// The address rule of web_fetch (web_tools.hpp): which addresses are not public. Pure: no I/O.
#pragma once

#include <optional>
#include <string>

#include <boost/asio/ip/address.hpp>

namespace supervisor {

// Why `a` is not a public address ("is loopback", "is private (RFC 1918)", ...), or nullopt when it
// is. IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by it.
std::optional<std::string> non_public_reason(const boost::asio::ip::address& a);

}  // namespace supervisor
