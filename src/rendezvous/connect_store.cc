// How every rank reaches the store.
//
// 1. The launcher named the store (kolorun, torchrun's MASTER_ADDR, Slurm's
//    first node, KOLO_STORE_ADDR): rank 0 starts it there when it is the
//    host, and everyone connects, retrying until rank 0 is up.
// 2. Nobody named it (a plain mpirun on one host): rank 0 starts the store on
//    an ephemeral port of 127.0.0.1 and publishes "127.0.0.1:<port> <token>"
//    in /tmp/kolo-rdv-<job key>; the others poll for that file. The token,
//    also stored in the store, guards against a stale file of a crashed job
//    whose port now belongs to some other store. Rank 0 removes the file as
//    soon as every rank has checked in, or when it gives up.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "rendezvous/discovery.h"

namespace kolo::rdv {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTokenKey = "kolo/rdv/token";
constexpr const char* kJoinedPrefix = "kolo/rdv/joined/";

// Ranks started by one mpirun on one host share their parent process, which
// makes its pid a job key when the launcher gives no job id.
std::string rendezvous_file(const Discovery& d) {
  std::string key = d.job_id.empty() ? fmt::format("ppid{}", ::getppid()) : d.job_id;
  for (char& c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  return "/tmp/kolo-rdv-" + key;
}

// Write-then-rename, so that a reader sees the whole line or no file.
void publish(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text << '\n';
    if (!f.flush()) fail("rendezvous: cannot write {}: {}", tmp, errno_text(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("rendezvous: cannot publish the store address in {}: {}", path, errno_text(err));
  }
}

std::string random_token() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}{:08x}", rd(), rd(), ::getpid());
}

std::unique_ptr<StoreClient> host_via_file(const Discovery& d, std::unique_ptr<StoreServer>& hosted,
                                           const std::string& path, Millis timeout) {
  hosted = std::make_unique<StoreServer>("127.0.0.1", 0);
  const std::string token = random_token();
  auto client = std::make_unique<StoreClient>("127.0.0.1", hosted->port(), timeout);
  client->set(kTokenKey, token);
  publish(path, fmt::format("127.0.0.1:{} {}", hosted->port(), token));
  log(LogLevel::Info, "rendezvous: store on 127.0.0.1:{}, published in {}", hosted->port(), path);
  std::vector<std::string> joined;
  for (int r = 1; r < d.size; ++r) joined.push_back(kJoinedPrefix + std::to_string(r));
  // The file goes whether everyone arrives or not, removed before the error
  // is thrown: an uncaught exception ends the process without unwinding.
  try {
    client->wait(joined, timeout);
  } catch (const Error&) {
    std::remove(path.c_str());
    std::string missing;
    for (int r = 1; r < d.size; ++r)
      if (!client->check({kJoinedPrefix + std::to_string(r)}))
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    fail("rendezvous: ranks {} did not reach the store published in {} within {} ms; "
         "ranks on other hosts cannot read that file: for a multi-host job set "
         "KOLO_STORE_ADDR=<rank 0's host>:<port>",
         missing, path, timeout.count());
  }
  std::remove(path.c_str());
  return client;
}

std::unique_ptr<StoreClient> join_via_file(const Discovery& d, const std::string& path, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string last_problem = "the file does not exist";
  for (;;) {
    std::ifstream f(path);
    std::string addr, token;
    if (f >> addr >> token) {
      const std::size_t colon = addr.rfind(':');
      try {
        // A short connect timeout: a stale file's port refuses at once, and
        // rank 0 may be about to replace the file.
        auto client = std::make_unique<StoreClient>(addr.substr(0, colon),
                                                    std::stoi(addr.substr(colon + 1)), Millis{1000});
        // Rank 0 stores the token before it publishes the file: no waiting.
        if (client->check({kTokenKey}) && client->get(kTokenKey, Millis{0}) == token) {
          client->set(kJoinedPrefix + std::to_string(d.rank), "");
          return client;
        }
        last_problem = fmt::format("the store at {} belongs to another job", addr);
      } catch (const std::exception& e) {
        last_problem = fmt::format("{} names {}: {}", path, addr, e.what());
      }
    }
    if (Clock::now() >= deadline)
      fail("rendezvous: no store address from rank 0 in {} within {} ms ({}). That file only "
           "works when all ranks share one host: for a multi-host job set "
           "KOLO_STORE_ADDR=<rank 0's host>:<port>",
           path, timeout.count(), last_problem);
    std::this_thread::sleep_for(Millis{20});
  }
}

}  // namespace

std::unique_ptr<StoreClient> connect_store(const Discovery& d, std::unique_ptr<StoreServer>& hosted) {
  const Millis timeout{config::rendezvous_timeout_ms()};
  if (!d.store_host.empty()) {
    // Bound to every interface: the other ranks come from other hosts.
    if (d.rank0_hosts_store && d.rank == 0) hosted = std::make_unique<StoreServer>("0.0.0.0", d.store_port);
    return std::make_unique<StoreClient>(d.store_host, d.store_port, timeout);
  }
  if (!d.rank0_hosts_store)
    fail("rendezvous: the launcher ({}) hosts the store but gave no address (KOLO_STORE_ADDR)", d.source);
  if (d.size == 1) {
    hosted = std::make_unique<StoreServer>("127.0.0.1", 0);
    return std::make_unique<StoreClient>("127.0.0.1", hosted->port(), timeout);
  }
  const std::string path = rendezvous_file(d);
  return d.rank == 0 ? host_via_file(d, hosted, path, timeout) : join_via_file(d, path, timeout);
}

}  // namespace kolo::rdv
