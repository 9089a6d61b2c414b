// The rendezvous key-value store: a small TCP server (hosted by kolorun, or by
// rank 0 when another launcher started the job) and its client.
//
// Operations: set, get (waits until the key exists), wait for several keys,
// atomic add on a 64-bit counter, check. Every wait has a deadline and a
// timeout names the keys that never appeared.
//
// Every connection starts with the handshake of auth.h: the client proves it
// holds the job's key before the server reads a single request from it, and
// the server proves it holds the key before the client sends one.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/auth.h"

namespace kolo::rdv {

using Millis = std::chrono::milliseconds;

class StoreServer {
 public:
  // Binds host:port (port 0 = an ephemeral port chosen by the kernel) and
  // serves on a thread of its own until destroyed or stop() is called. Only
  // clients that prove they hold `key` are served; the others are closed and
  // logged.
  StoreServer(const std::string& bind_host, int port, const auth::Key& key);
  // Transitional: a store that does not know the job's key checks nothing
  // (its challenge says so, and clients accept it with an info message).
  // Only kolorun still calls this, until it passes the job's key.
  [[deprecated("pass the job's key: a store without one lets any client in")]]
  explicit StoreServer(const std::string& bind_host = "0.0.0.0", int port = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  void stop();

  // For a store that a rank hosts for its peers (rendezvous/hosted_store.h):
  // from now on the server stops by itself as soon as no connection is left
  // but those of host_rank itself (its other communicators, the timeline).
  void retire(int host_rank);
  // After retire(): waits until the server has stopped or until `deadline`.
  // False at the deadline, with who still holds a connection in *holders
  // ("rank 1", "ranks 1, 3").
  bool wait_retired(std::chrono::steady_clock::time_point deadline, std::string* holders);
  // Inherited through fork(): the copy has no server thread, so it is
  // neither stopped nor waited for (its destructor frees nothing).
  bool forked_copy() const;

 private:
  void start(const std::string& bind_host, int port, const auth::Key* key);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class StoreClient {
 public:
  // Connects, retrying until connect_timeout (the server may start later),
  // and authenticates with `key` as `me`. A store that refuses the key, or
  // cannot prove it holds it, is an error at once (it belongs to another job).
  StoreClient(const std::string& host, int port, Millis connect_timeout, const auth::Key& key,
              const auth::Identity& me = {});
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Waits until key exists; throws kolo::Error naming the key after timeout.
  std::string get(const std::string& key, Millis timeout);
  // Atomically adds delta to the integer stored at key (0 if absent); returns the new value.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Waits until all keys exist; the error lists the ones still missing.
  void wait(const std::vector<std::string>& keys, Millis timeout);
  // True when all keys exist (does not wait).
  bool check(const std::vector<std::string>& keys);
  // The store host's clock (system_clock, ns since the epoch), for aligning
  // ranks' clocks (timeline/recorder.h).
  std::int64_t server_clock_ns();

  // The local IP address of this connection: an address of this host that
  // the store's host can reach, which ranks publish for their data sockets.
  std::string local_address() const;

  // The job's key this client authenticated with: the data connections prove
  // it to each other too.
  const auth::Key& job_key() const;

  // A second connection to the same store with the same key: a subgroup's
  // communicator gets its own, so that its setup and failure reports never
  // queue behind another communicator's waits on this one.
  std::unique_ptr<StoreClient> connect_again(Millis connect_timeout, const auth::Identity& me) const;

  // Who hosts the store ("rank 0"), named when the connection is lost: a
  // rank that hosts the store keeps it up until its peers are done
  // (hosted_store.h), so losing it means that rank crashed or was killed.
  void set_host(const std::string& who);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::rdv
