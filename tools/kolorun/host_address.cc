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

#include "core/error.h"
#include "transport/nic.h"

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
  std::string ip;
  try {
    ip = kolo::transport::interface_address(iface);
  } catch (const kolo::Error&) {
    throw AddressError(fmt::format("--network-interface {}: neither an interface name nor an IPv4 CIDR such as "
                                   "10.0.0.0/24", iface));
  }
  if (ip.empty())
    throw AddressError(fmt::format("--network-interface {}: {} on this host (IPv4 interfaces: {})", iface,
                                   iface.find('/') != std::string::npos ? "no address inside that network"
                                                                        : "no IPv4 interface of that name",
                                   kolo::transport::interface_list()));
  return ip;
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
