// A rendezvous store that a rank hosts for its peers: rank 0 under a plain
// mpirun, torchrun-style variables or Slurm (connect_store(); kolorun hosts
// its own store and is not concerned).
//
// Such a store must outlive the host rank's use of it: a short program, a
// rank with nothing to do or a rank that fails on a local error leaves while
// its peers are still inside init() (between their last store requests) or
// about to post a failure, and a store that vanished with it would fail them
// ("lost connection to the rendezvous store"). So a hosted store is never
// stopped when its owner lets go of it (the communicator's Context, after the
// engine and the transport are gone: a peer waiting on this rank in a
// collective fails at once instead of holding the store); it is retired:
// it serves on, on its own thread, and stops by itself when no other rank
// holds a connection to it. Each peer closes its connections when its
// communicator goes or its process ends.
//
// At process exit (main returns, exit(), the end of a Python program) the
// process waits for its retired stores, together at most
// KOLO_STORE_LINGER_MS, and then warns naming the ranks that still hold one
// and stops them. A store retired during exit, after that wait (a static
// Communicator, the store on a named port), is waited for on the spot.
// Not covered: a process killed by a signal, ended by an uncaught exception
// (std::terminate) or by _exit(): its peers then report the store lost,
// naming rank 0 (store_client.cc).
//
// A forked child inherits these objects but not their threads: it neither
// waits for them nor stops them.
#pragma once

#include <memory>

#include "rendezvous/store.h"

namespace kolo::rdv {

// The deleter of a HostedStore: retires the store instead of stopping it.
struct RetireStore {
  int host_rank = 0;
  void operator()(StoreServer* store) const;
};
using HostedStore = std::unique_ptr<StoreServer, RetireStore>;

// Starts a store (as StoreServer's constructor) that host_rank hosts for its peers.
HostedStore host_store(int host_rank, const std::string& bind_host, int port, const auth::Key& key);

}  // namespace kolo::rdv
