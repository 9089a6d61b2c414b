// Addresses of the launching host: is a host name this machine, and which of
// this machine's addresses do the other hosts reach the store at.
#pragma once

#include <stdexcept>
#include <string>

namespace kolorun {

// A name that does not resolve, an interface that does not exist: the
// message says which and what exists instead.
class AddressError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True when `host` is this machine: "localhost", this host's name, or a name
// whose addresses include a loopback address or one of this machine's
// interface addresses (as mpirun and horovodrun decide it). A name that does
// not resolve is not local (ssh will say why it cannot reach it).
bool is_local_host(const std::string& host);

// The IPv4 address the store is advertised at, as "a.b.c.d":
// - `iface` given (--network-interface NAME or CIDR): the address of the
//   interface of that name, or this machine's address inside that CIDR;
// - otherwise the source address the kernel would use to reach `peer` (the
//   first remote host), i.e. the interface that routes there.
// Throws AddressError naming what was asked and what exists.
std::string interface_address(const std::string& iface);
std::string route_source_address(const std::string& peer);

}  // namespace kolorun
