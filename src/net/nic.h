// Which address a rank advertises for its data connections (NIC choice),
// from this host's addresses (net/address.h).
//
// A multi-homed host has several addresses, and some of them exist on every
// host: loopback, and local bridges such as docker0 (172.17.0.1 everywhere).
// A rank that advertises one of those makes its peers connect to themselves
// (the Horovod/Gloo hang of horovod issues 310 and 584). kolo therefore never
// guesses from the list of interfaces. It takes:
//   1. KOLO_IFACE=NAME (that interface's IPv4 address) or KOLO_IFACE=CIDR
//      (the local address inside it), when set; else
//   2. the address of the interface that routes to the store's host: the
//      local address of this rank's store connection, which the kernel chose
//      by routing to the store (what a UDP connect + getsockname would say).
//      Every rank reached that store, so this address is on a network the
//      store's host shares with it.
//   3. Loopback only when every rank reached the store over loopback (they
//      then share one network namespace). A rank on the store's machine that
//      reached it over loopback while others came over the network routes
//      instead toward the address another rank reached the store from (UDP
//      connect + getsockname): the interface its peers can reach it on.
#pragma once

#include <string>
#include <vector>

namespace kolo::net {

// routes[q]: the local address of rank q's store connection (step 2 above).
// `host` names this host in messages. Logs the choice at info level; throws
// kolo::Error for a KOLO_IFACE that matches nothing, listing the interfaces.
std::string choose_address(const std::vector<std::string>& routes, int rank, const std::string& host);

// KOLO_IFACE's address on this host (named `host` in the error), or "" when
// KOLO_IFACE is not set: what kolo::iface_address() (kolo.h) returns.
std::string iface_address(const std::string& host);

}  // namespace kolo::net
