// This host's addresses: its IPv4 interfaces, the one a setting such as
// KOLO_IFACE or kolorun's --network-interface names, the one the kernel
// routes from toward another host, and whether a host name is this machine.
// The ranks (net/nic.h), kolorun and, through kolo._C, the Python fronts all
// ask here, so an interface is chosen the same way everywhere.
#pragma once

#include <sys/socket.h>

#include <string>

#include "core/error.h"

namespace kolo::net {

// A name that does not resolve, an interface that does not exist, no route:
// the message says which and what exists instead.
class AddressError : public Error {
 public:
  using Error::Error;
};

// An interface name ("eth1": its IPv4 address) or an IPv4 CIDR
// ("10.0.0.0/24": this host's address inside it). Empty when this host has
// none; throws AddressError when a value with '/' is no CIDR.
std::string interface_address(const std::string& name_or_cidr);

// As interface_address, for a setting: `setting` says where the value came
// from ("KOLO_IFACE=eth9", "--network-interface eth9") and `where` names this
// host ("host node3", "this host"); no such interface is an AddressError
// listing the interfaces there.
std::string interface_address_for(const std::string& setting, const std::string& name_or_cidr,
                                  const std::string& where);

// "lo 127.0.0.1, eth0 10.0.0.2, docker0 172.17.0.1": this host's IPv4 interfaces.
std::string interface_list();

// The name of the interface holding ip ("?" when none does).
std::string interface_name(const std::string& ip);

// The local IPv4 address the kernel would send from to reach `host` (a name
// or an address): the interface that routes there. A connected UDP socket
// sends nothing; connect() only asks the routing table. Throws AddressError
// naming the host when it does not resolve or has no route.
std::string route_source(const std::string& host);

// True when `host` is this machine: "localhost", this host's name, or a name
// whose addresses include a loopback address or one of this machine's
// interface addresses (as mpirun and horovodrun decide it). A name that does
// not resolve is not local.
bool is_local_host(const std::string& host);

bool is_loopback(const std::string& ip);

// "10.1.2.3" or, with the port, "10.1.2.3:29500" ("[::1]:29500" for IPv6).
std::string address_text(const sockaddr* a, bool with_port);

}  // namespace kolo::net
