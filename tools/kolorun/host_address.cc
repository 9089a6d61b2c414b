#include "host_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

namespace kolorun {

namespace {

struct IfAddrs {
  ifaddrs* list = nullptr;
  IfAddrs() {
    if (::getifaddrs(&list) != 0) throw AddressError(fmt::format("getifaddrs: {}", std::strerror(errno)));
  }
  ~IfAddrs() { ::freeifaddrs(list); }
};

std::string ntop(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return false;
}

std::set<std::string> own_addresses() {
  std::set<std::string> out;
  IfAddrs ifs;
  for (ifaddrs* i = ifs.list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
      out.insert(ntop(i->ifa_addr));
  }
  return out;
}

// Parses "a.b.c.d/len"; false when `text` is not an IPv4 CIDR.
bool parse_cidr(const std::string& text, std::uint32_t& net, std::uint32_t& mask) {
  const auto slash = text.find('/');
  if (slash == std::string::npos) return false;
  in_addr a{};
  if (::inet_pton(AF_INET, text.substr(0, slash).c_str(), &a) != 1) return false;
  int len = -1;
  try {
    std::size_t used = 0;
    len = std::stoi(text.substr(slash + 1), &used);
    if (used != text.size() - slash - 1) return false;
  } catch (const std::exception&) {
    return false;
  }
  if (len < 0 || len > 32) return false;
  mask = len == 0 ? 0 : ~std::uint32_t{0} << (32 - len);
  net = ntohl(a.s_addr) & mask;
  return true;
}

}  // namespace

bool is_local_host(const std::string& host) {
  if (host == "localhost") return true;
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && host == name) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  const std::set<std::string> own = own_addresses();
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (is_loopback(a->ai_addr) || own.count(ntop(a->ai_addr)) > 0) return true;
  }
  return false;
}

std::string interface_address(const std::string& iface) {
  std::uint32_t net = 0, mask = 0;
  const bool cidr = parse_cidr(iface, net, mask);
  IfAddrs ifs;
  std::set<std::string> seen;
  for (ifaddrs* i = ifs.list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* sin = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    seen.insert(fmt::format("{} ({})", i->ifa_name, ntop(i->ifa_addr)));
    if (cidr ? (ntohl(sin->sin_addr.s_addr) & mask) == net : iface == i->ifa_name) return ntop(i->ifa_addr);
  }
  std::string have;
  for (const auto& s : seen) have += (have.empty() ? "" : ", ") + s;
  throw AddressError(fmt::format("--network-interface {}: {} on this host (IPv4 interfaces: {})", iface,
                                 cidr ? "no address inside that network" : "no IPv4 interface of that name",
                                 have.empty() ? "none" : have));
}

std::string route_source_address(const std::string& peer) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(peer.c_str(), "9", &hints, &res); rc != 0)
    throw AddressError(fmt::format("cannot resolve host '{}': {}", peer, ::gai_strerror(rc)));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  // A connected UDP socket sends nothing: connect() only asks the routing
  // table which source address packets to `peer` would carry.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw AddressError(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  const bool ok = ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    throw AddressError(fmt::format("no route from this host to '{}' ({}): {}", peer, ntop(res->ai_addr),
                                   std::strerror(err)));
  return ntop(reinterpret_cast<sockaddr*>(&local));
}

}  // namespace kolorun
