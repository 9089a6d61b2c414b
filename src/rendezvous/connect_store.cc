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
//
// The job's key (auth.h) comes from KOLO_SECRET. Without it, case 2 uses the
// token, a random secret that only the user's own processes can read (the
// file is mode 0600), and case 1 derives a key from what every rank knows:
// the launcher, job id, store address and size. That key keeps out the ranks
// of other jobs and stale ranks of earlier runs with another job id, not a
// process that knows those facts: an info message says so.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
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

// Write-then-rename, so that a reader sees the whole line or no file. Mode
// 0600: the token in it is the job's secret when KOLO_SECRET is not set.
void publish(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("rendezvous: cannot write {}: {}", tmp, errno_text(errno));
  const std::string line = text + '\n';
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  const int err = errno;
  ::close(fd);
  if (!ok) {
    std::remove(tmp.c_str());
    fail("rendezvous: cannot write {}: {}", tmp, errno_text(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("rendezvous: cannot publish the store address in {}: {}", path, errno_text(err));
  }
}

auth::Identity identity(const Discovery& d) { return {d.rank, d.size, -1}; }

// The key of a job whose launcher named the store (case 1).
auth::Key named_store_key(const Discovery& d) {
  if (!d.secret.empty()) {
    if (d.secret.size() < 16 && d.rank == 0)
      log(LogLevel::Warn, "KOLO_SECRET has only {} characters; a secret this short can be guessed: "
          "use e.g. $(openssl rand -hex 16)", d.secret.size());
    return auth::Key::from_secret(d.secret);
  }
  if (d.rank == 0)
    log(LogLevel::Info, "KOLO_SECRET is not set: this job is not protected by a secret. Its ranks "
        "authenticate with a key derived from the job id and store address, which keeps out other "
        "jobs but not a process that knows them. Give every rank the same random KOLO_SECRET, e.g. "
        "mpirun -x KOLO_SECRET=$(openssl rand -hex 16) ..., or srun --export=ALL,KOLO_SECRET=... "
        "(kolorun does this itself)");
  return auth::Key::from_secret(fmt::format("kolo default secret|{}|{}|{}|{}|{}", d.source, d.job_id,
                                            d.store_host, d.store_port, d.size));
}

// Case 2: KOLO_SECRET, or else the token rank 0 publishes in the 0600 file.
auth::Key file_key(const Discovery& d, const std::string& token) {
  return auth::Key::from_secret(d.secret.empty() ? token : d.secret);
}

std::unique_ptr<StoreClient> host_via_file(const Discovery& d, HostedStore& hosted,
                                           const std::string& path, Millis timeout) {
  const std::string token = auth::random_secret();
  const auth::Key key = file_key(d, token);
  hosted = host_store(d.rank, "127.0.0.1", 0, key);
  auto client = std::make_unique<StoreClient>("127.0.0.1", hosted->port(), timeout, key, identity(d));
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
        // A store of another job (a stale file) refuses our key: we retry.
        auto client = std::make_unique<StoreClient>(addr.substr(0, colon),
                                                    std::stoi(addr.substr(colon + 1)), Millis{1000},
                                                    file_key(d, token), identity(d));
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

namespace {

HostedStore named_store;  // see reach_store()

std::unique_ptr<StoreClient> reach_store(const Discovery& d, HostedStore& hosted) {
  const Millis timeout{config::rendezvous_timeout_ms()};
  if (!d.store_host.empty()) {
    // Bound to every interface: the other ranks come from other hosts.
    const auth::Key key = named_store_key(d);
    if (d.rank0_hosts_store && d.rank == 0) {
      // Kept for the life of the process and reused by a later init() (after
      // shutdown): the other ranks cannot tell a store on this port closing
      // from one opening, and one that reconnected first would have joined
      // the old store. Communicators keep apart by key prefix (kolo/comm<n>).
      // At exit it is retired like the others (hosted_store.h).
      if (!named_store || named_store->port() != d.store_port) {
        named_store.reset();
        try {
          named_store = host_store(d.rank, "0.0.0.0", d.store_port, key);
        } catch (const Error& e) {
          if (d.store_port_origin.empty()) throw;
          throw Error(fmt::format("{} (port {} is {})", e.what(), d.store_port, d.store_port_origin));
        }
      }
    }
    return std::make_unique<StoreClient>(d.store_host, d.store_port, timeout, key, identity(d));
  }
  if (!d.rank0_hosts_store)
    fail("rendezvous: the launcher ({}) hosts the store but gave no address (KOLO_STORE_ADDR)", d.source);
  if (d.size == 1) {
    // Nobody else needs to reach this store: a random key keeps everyone out.
    const auth::Key key = auth::Key::random();
    hosted = host_store(d.rank, "127.0.0.1", 0, key);
    return std::make_unique<StoreClient>("127.0.0.1", hosted->port(), timeout, key, identity(d));
  }
  const std::string path = rendezvous_file(d);
  return d.rank == 0 ? host_via_file(d, hosted, path, timeout) : join_via_file(d, path, timeout);
}

}  // namespace

const StoreServer* named_port_store() { return named_store.get(); }

std::unique_ptr<StoreClient> connect_store(const Discovery& d, HostedStore& hosted) {
  auto client = reach_store(d, hosted);
  if (d.rank0_hosts_store) client->set_host("rank 0");
  return client;
}

}  // namespace kolo::rdv
