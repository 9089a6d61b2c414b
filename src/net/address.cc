#include "net/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

namespace kolo::net {

namespace {

// AddressError's text is the bare message: kolorun shows it as its own, and
// the ranks add their rank prefix where they report it (net/nic.cc).
template <class... Args>
[[noreturn]] void fail_address(fmt::format_string<Args...> f, Args&&... args) {
  throw AddressError(fmt::format(f, std::forward<Args>(args)...));
}

using IfAddrs = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

IfAddrs interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) fail_address("getifaddrs(): {}", errno_text(errno));
  return IfAddrs(list, freeifaddrs);
}

struct Ipv4 {
  std::string name;
  in_addr addr;
  std::string text;
};

std::vector<Ipv4> ipv4_interfaces() {
  std::vector<Ipv4> out;
  IfAddrs list = interfaces();
  for (ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    out.push_back({i->ifa_name, reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr,
                   address_text(i->ifa_addr, /*with_port=*/false)});
  }
  return out;
}

// Every address of every interface, IPv4 and IPv6.
std::set<std::string> own_addresses() {
  std::set<std::string> out;
  IfAddrs list = interfaces();
  for (ifaddrs* i = list.get(); i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
      out.insert(address_text(i->ifa_addr, /*with_port=*/false));
  return out;
}

}  // namespace

std::string interface_address(const std::string& name_or_cidr) {
  const auto ifs = ipv4_interfaces();
  const auto slash = name_or_cidr.find('/');
  if (slash == std::string::npos) {
    for (const Ipv4& f : ifs)
      if (f.name == name_or_cidr) return f.text;
    return "";
  }
  in_addr net{};
  int bits = -1;
  std::size_t used = 0;
  try {
    bits = std::stoi(name_or_cidr.substr(slash + 1), &used);
  } catch (const std::exception&) {
  }
  if (inet_pton(AF_INET, name_or_cidr.substr(0, slash).c_str(), &net) != 1 || bits < 0 || bits > 32 ||
      used != name_or_cidr.size() - slash - 1)
    fail_address("'{}' is neither an interface name nor an IPv4 CIDR such as 10.0.0.0/24", name_or_cidr);
  const std::uint32_t mask = bits == 0 ? 0 : htonl(~std::uint32_t{0} << (32 - bits));
  for (const Ipv4& f : ifs)
    if ((f.addr.s_addr & mask) == (net.s_addr & mask)) return f.text;
  return "";
}

std::string interface_address_for(const std::string& setting, const std::string& name_or_cidr,
                                  const std::string& where) {
  std::string ip;
  try {
    ip = interface_address(name_or_cidr);
  } catch (const AddressError&) {
    fail_address("{} is neither an interface name nor an IPv4 CIDR such as 10.0.0.0/24", setting);
  }
  if (ip.empty())
    fail_address("{}: {} has no {}; its interfaces: {}", setting, where,
                 name_or_cidr.find('/') == std::string::npos ? "interface of that name with an IPv4 address"
                                                             : "IPv4 address in that network",
                 interface_list());
  return ip;
}

std::string interface_list() {
  std::string s;
  for (const Ipv4& f : ipv4_interfaces()) s += (s.empty() ? "" : ", ") + f.name + " " + f.text;
  return s.empty() ? "(none)" : s;
}

std::string interface_name(const std::string& ip) {
  for (const Ipv4& f : ipv4_interfaces())
    if (f.text == ip) return f.name;
  return "?";
}

std::string route_source(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res); rc != 0)
    fail_address("cannot resolve host '{}': {}", host, ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_address("socket(): {}", errno_text(errno));
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  const bool ok = ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok)
    fail_address("no route from this host to '{}' ({}): {}", host, address_text(res->ai_addr, false),
                 errno_text(err));
  return address_text(reinterpret_cast<sockaddr*>(&local), /*with_port=*/false);
}

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
    const std::string ip = address_text(a->ai_addr, /*with_port=*/false);
    if (is_loopback(ip) || own.count(ip) > 0) return true;
  }
  return false;
}

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0 || ip == "::1"; }

std::string address_text(const sockaddr* a, bool with_port) {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(a);
    ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    return with_port ? fmt::format("{}:{}", ip, ntohs(in->sin_port)) : std::string(ip);
  }
  if (a->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    return with_port ? fmt::format("[{}]:{}", ip, ntohs(in6->sin6_port)) : std::string(ip);
  }
  return "?";
}

}  // namespace kolo::net
