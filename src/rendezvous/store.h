// The rendezvous key-value store: a small TCP server (hosted by kolorun, or by
// rank 0 when another launcher started the job) and its client.
//
// Operations: set, get (waits until the key exists), wait for several keys,
// atomic add on a 64-bit counter, check. Every wait has a deadline and a
// timeout names the keys that never appeared.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kolo::rdv {

using Millis = std::chrono::milliseconds;

class StoreServer {
 public:
  // Binds host:port (port 0 = an ephemeral port chosen by the kernel) and
  // serves on a thread of its own until destroyed or stop() is called.
  explicit StoreServer(const std::string& bind_host = "0.0.0.0", int port = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class StoreClient {
 public:
  // Connects, retrying until connect_timeout (the server may start later).
  StoreClient(const std::string& host, int port, Millis connect_timeout);
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

  // The local IP address of this connection: an address of this host that
  // the store's host can reach, which ranks publish for their data sockets.
  std::string local_address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::rdv
