#include "net/nic.h"

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "net/address.h"

namespace kolo::net {

namespace {

// KOLO_IFACE's address, its absence an error naming this rank and host.
std::string from_setting(const std::string& want, const std::string& host) {
  try {
    return interface_address_for("KOLO_IFACE=" + want, want, "host " + host);
  } catch (const AddressError& e) {
    fail("{}", e.what());
  }
}

// route_source(), "" where there is none.
std::string route_to(const std::string& ip) {
  try {
    return route_source(ip);
  } catch (const AddressError&) {
    return "";
  }
}

}  // namespace

std::string choose_address(const std::vector<std::string>& routes, int rank, const std::string& host) {
  const std::string want = config::iface();
  if (!want.empty()) {
    const std::string ip = from_setting(want, host);
    log(LogLevel::Info, "data connections: advertising {} (interface {}, KOLO_IFACE={})", ip, interface_name(ip),
        want);
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
  log(LogLevel::Info, "data connections: advertising {} (interface {}, {})", ip, interface_name(ip), why);
  return ip;
}

std::string iface_address(const std::string& host) {
  const std::string want = config::iface();
  return want.empty() ? "" : from_setting(want, host);
}

}  // namespace kolo::net
