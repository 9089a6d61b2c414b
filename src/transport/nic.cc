#include "transport/nic.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "rendezvous/hosts.h"

namespace kolo::transport {

namespace {

struct Iface {
  std::string name;
  in_addr addr;
  std::string text;
};

std::vector<Iface> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) fail("getifaddrs(): {}", errno_text(errno));
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  std::vector<Iface> out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    Iface f{i->ifa_name, reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, ""};
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &f.addr, buf, sizeof buf);
    f.text = buf;
    out.push_back(std::move(f));
  }
  return out;
}

bool is_loopback(const std::string& ip) { return ip.rfind("127.", 0) == 0 || ip == "::1"; }

std::string name_of(const std::string& ip) {
  for (const Iface& f : ipv4_interfaces())
    if (f.text == ip) return f.name;
  return "?";
}

// KOLO_IFACE: as interface_address(), its absence an error naming the host.
std::string from_setting(const std::string& want, const std::string& host) {
  std::string ip;
  try {
    ip = interface_address(want);
  } catch (const Error&) {
    fail("KOLO_IFACE={} is neither an interface name nor an IPv4 CIDR such as 10.0.0.0/24", want);
  }
  if (ip.empty())
    fail("KOLO_IFACE={}: host {} has no {}; its interfaces: {}", want, host,
         want.find('/') == std::string::npos ? "interface of that name with an IPv4 address"
                                              : "IPv4 address in that network",
         interface_list());
  return ip;
}

// The local address the kernel would send from to reach ip (UDP connect
// sends nothing; it only asks the routing table).
std::string route_to(const std::string& ip) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  if (inet_pton(AF_INET, ip.c_str(), &to.sin_addr) != 1) return "";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string out;
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
    out = buf;
  }
  ::close(fd);
  return out;
}

}  // namespace

std::string interface_address(const std::string& name_or_cidr) {
  const auto ifs = ipv4_interfaces();
  const auto slash = name_or_cidr.find('/');
  if (slash == std::string::npos) {
    for (const Iface& f : ifs)
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
    fail("'{}' is neither an interface name nor an IPv4 CIDR such as 10.0.0.0/24", name_or_cidr);
  const std::uint32_t mask = bits == 0 ? 0 : htonl(~std::uint32_t{0} << (32 - bits));
  for (const Iface& f : ifs)
    if ((f.addr.s_addr & mask) == (net.s_addr & mask)) return f.text;
  return "";
}

std::string interface_list() {
  std::string s;
  for (const Iface& f : ipv4_interfaces()) s += (s.empty() ? "" : ", ") + f.name + " " + f.text;
  return s.empty() ? "(none)" : s;
}

std::string choose_address(const std::vector<std::string>& routes, int rank, const std::string& host) {
  const std::string want = config::iface();
  if (!want.empty()) {
    const std::string ip = from_setting(want, host);
    log(LogLevel::Info, "data connections: advertising {} (interface {}, KOLO_IFACE={})", ip, name_of(ip), want);
    return ip;
  }
  std::string ip = routes[rank];
  std::string why = "the route to the rendezvous store";
  if (is_loopback(ip)) {
    // Some rank reached the store over the network: it is elsewhere, and
    // must not be told to connect to a loopback address.
    for (std::size_t q = 0; q < routes.size(); ++q) {
      if (is_loopback(routes[q])) continue;
      const std::string via = route_to(routes[q]);
      if (via.empty() || is_loopback(via)) continue;  // that rank is on this machine
      ip = via;
      why = fmt::format("the route to rank {} at {}, which reached the store over the network", q, routes[q]);
      break;
    }
  }
  log(LogLevel::Info, "data connections: advertising {} (interface {}, {})", ip, name_of(ip), why);
  return ip;
}

}  // namespace kolo::transport

namespace kolo {

// kolo.h.
std::string iface_address() {
  const std::string want = config::iface();
  return want.empty() ? "" : transport::from_setting(want, rdv::host_name());
}

}  // namespace kolo
