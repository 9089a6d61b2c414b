#include "rendezvous/hosts.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>

#include "core/config.h"
#include "core/error.h"

namespace kolo::rdv {

namespace {

std::string boot_id() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

constexpr const char* kShm = "/dev/shm/";  // where shm_open's names live (glibc, Linux)
constexpr std::string_view kTokenTag = "-host-";
constexpr std::size_t kTokenHex = 24;  // the random suffix's hex digits

// "kolo-<job>-host-<24 hex digits>": a host token's name, nothing else's.
bool is_token_name(std::string_view n) {
  if (n.substr(0, 5) != "kolo-" || n.size() < 5 + kTokenTag.size() + kTokenHex) return false;
  const std::string_view tail = n.substr(n.size() - kTokenHex - kTokenTag.size());
  return tail.substr(0, kTokenTag.size()) == kTokenTag &&
         std::all_of(tail.begin() + kTokenTag.size(), tail.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

// Removes the tokens of processes that died during discovery (SIGKILL skips
// ~Token). A token's creator holds a shared flock on it from before it has
// its name until it is unlinked, so a token that takes an exclusive lock has
// no living creator, whatever pid namespace that creator was in.
void sweep_orphan_tokens() {
  DIR* d = opendir(kShm);
  if (d == nullptr) return;
  while (const dirent* e = readdir(d)) {
    if (!is_token_name(e->d_name)) continue;
    const std::string path = std::string(kShm) + e->d_name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) ::unlink(path.c_str());
    close(fd);
  }
  closedir(d);
}

// A file in this host's /dev/shm that only ranks sharing it can open. It is
// made under a hidden name, locked, then renamed, so that no sweep (above)
// ever sees a token of a living process unlocked.
class Token {
 public:
  explicit Token(const std::string& job_id) {
    sweep_orphan_tokens();
    std::random_device rd;
    const std::string base =
        fmt::format("kolo-{}{}{:08x}{:08x}{:08x}", job_id.empty() ? "job" : job_id, kTokenTag, rd(), rd(), rd());
    const std::string hidden = std::string(kShm) + "." + base, path = std::string(kShm) + base;
    fd_ = ::open(hidden.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) fail("cannot create the host token {} in /dev/shm: {}", base, errno_text(errno));
    if (flock(fd_, LOCK_SH) != 0 || ::rename(hidden.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(hidden.c_str());
      close(fd_);
      fail("cannot create the host token {} in /dev/shm: {}", base, errno_text(err));
    }
    name_ = "/" + base;
  }
  ~Token() {
    shm_unlink(name_.c_str());
    close(fd_);  // drops the lock, after the name is gone
  }
  Token(const Token&) = delete;
  Token& operator=(const Token&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int fd_ = -1;
};

bool can_open(const std::string& token) {
  const int fd = shm_open(token.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

struct Record {
  std::string name, boot, token, route;
};

Record parse(const std::string& text) {
  std::istringstream in(text);
  Record r;
  std::getline(in, r.name);
  std::getline(in, r.boot);
  std::getline(in, r.token);
  std::getline(in, r.route);
  return r;
}

}  // namespace

std::string host_name() {
  std::string host = config::hostname_override();
  if (host.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  return host;
}

void wait_for_ranks(StoreClient& store, const std::string& name, int size, Millis timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}/{}", name, r));
  try {
    store.wait(keys, timeout);
  } catch (const IoError&) {
    throw;
  } catch (const Error&) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < size; ++r)
      if (!store.check({keys[r]})) missing += (count++ ? ", " : "") + std::to_string(r);
    fail("rendezvous: {} of {} ranks never arrived within {} ms: rank{} {} (did they start, with the same launcher variables?)",
         count, size, timeout.count(), count == 1 ? "" : "s", missing);
  }
}

void store_barrier(StoreClient& store, const std::string& name, int rank, int size) {
  store.set(fmt::format("{}/{}", name, rank), "1");
  wait_for_ranks(store, name, size, Millis(config::rendezvous_timeout_ms()));
}

bool store_barrier_unless(StoreClient& store, const std::string& name, const std::string& abandon, int rank,
                          int size, Millis limit) {
  try {
    std::vector<std::string> all, failed;
    for (int q = 0; q < size; ++q) {
      all.push_back(fmt::format("{}/{}", name, q));
      failed.push_back(fmt::format("{}/{}", abandon, q));
    }
    store.set(all[rank], "1");
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!store.check(all)) {
      for (const auto& k : failed)
        if (store.check({k})) return false;
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

HostMap map_hosts(StoreClient& store, const std::string& prefix, const std::string& job_id, int rank,
                  int size, const std::string& route) {
  const Millis timeout(config::rendezvous_timeout_ms());
  const Token token(job_id);
  const Record me{host_name(), boot_id(), token.name(), route};
  // Two processes with one rank (a program that starts its own workers and
  // lets them inherit the launcher's variables) would otherwise overwrite
  // each other's records and mix into one job: the second to arrive stops.
  if (store.add(fmt::format("{}/claim/{}", prefix, rank), 1) != 1)
    fail("rendezvous: rank {} of {} is already taken by another process (this one: pid {} on {}); "
         "two processes were started with the same rank: does the program start its own workers "
         "under a launcher that already started one process per rank (torch.multiprocessing.spawn, "
         "Lightning's strategy \"ddp_spawn\")? Let the launcher start every rank: in Lightning, "
         "strategy \"ddp\" or \"ddp_kolo\", and under kolorun plugins=[kolo.lightning.KoloEnvironment()] "
         "if the Trainer still starts workers of its own",
         rank, size, getpid(), me.name);
  store.set(fmt::format("{}/host/{}", prefix, rank), fmt::format("{}\n{}\n{}\n{}", me.name, me.boot, me.token, me.route));
  wait_for_ranks(store, prefix + "/host", size, timeout);
  std::vector<Record> all(size);
  for (int q = 0; q < size; ++q) all[q] = parse(store.get(fmt::format("{}/host/{}", prefix, q), timeout));

  // My host is named by its lowest rank; the others learn it from the store,
  // since only ranks of a host can see its tokens.
  int leader = rank;
  for (int q = 0; q < rank && leader == rank; ++q)
    if (all[q].name == me.name && all[q].boot == me.boot && can_open(all[q].token)) leader = q;
  store.set(fmt::format("{}/hostof/{}", prefix, rank), std::to_string(leader));
  wait_for_ranks(store, prefix + "/hostof", size, timeout);  // also: every rank has looked at the tokens

  HostMap m;
  m.host_of.resize(size);
  std::vector<int> index_of_leader(size, -1);
  for (int q = 0; q < size; ++q) {
    m.routes.push_back(all[q].route);
    m.machine_ranks += all[q].boot == me.boot;
    const int l = std::stoi(store.get(fmt::format("{}/hostof/{}", prefix, q), timeout));
    if (l < 0 || l > q) fail("rendezvous: rank {} names rank {} as its host's first rank", q, l);
    if (index_of_leader[l] < 0) {
      index_of_leader[l] = m.hosts();
      m.ranks.emplace_back();
      m.names.push_back(all[l].name);
    }
    m.host_of[q] = index_of_leader[l];
    m.ranks[index_of_leader[l]].push_back(q);
  }
  return m;
}

}  // namespace kolo::rdv
