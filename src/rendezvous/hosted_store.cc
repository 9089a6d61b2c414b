#include "rendezvous/hosted_store.h"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <vector>

#include "core/config.h"
#include "core/log.h"

namespace kolo::rdv {

namespace {

using Clock = std::chrono::steady_clock;

// The retired stores still serving peers. Never destroyed: a store may be
// retired during exit, after the wait below has run.
struct Retired {
  std::mutex mu;
  std::vector<std::unique_ptr<StoreServer>> stores;
  bool exited = false;  // the wait at exit has run
};

Retired& retired() {
  static auto* r = new Retired;
  return *r;
}

// Waits for each store to stop, all by one deadline, then stops those that did not.
void wait_for_peers(std::vector<std::unique_ptr<StoreServer>> stores) {
  const Millis bound{config::store_linger_ms()};
  const auto deadline = Clock::now() + bound;
  for (auto& s : stores) {
    std::string holders;
    if (s->wait_retired(Clock::now(), &holders)) continue;
    log(LogLevel::Info, "rendezvous: exiting: waiting up to {} ms (KOLO_STORE_LINGER_MS) for {} to finish "
        "with the store this rank hosts on port {}", bound.count(), holders, s->port());
    if (s->wait_retired(deadline, &holders)) continue;
    log(LogLevel::Warn, "rendezvous: {} still held the store this rank hosts on port {} after {} ms "
        "(KOLO_STORE_LINGER_MS); this rank stops it and exits: a rank that uses it later gets "
        "'lost connection to the rendezvous store'", holders, s->port(), bound.count());
  }
}

// At exit, after the program's own objects (a namespace-scope object of the
// library: destroyed after those constructed later, e.g. in main).
struct WaitAtExit {
  ~WaitAtExit() {
    if (::getpid() != pid) return;
    std::vector<std::unique_ptr<StoreServer>> stores;
    {
      std::lock_guard lk(retired().mu);
      retired().exited = true;
      stores = std::move(retired().stores);
    }
    std::erase_if(stores, [](auto& s) {
      if (!s->forked_copy()) return false;
      (void)s.release();  // the parent's: leave it alone
      return true;
    });
    wait_for_peers(std::move(stores));
  }
  const pid_t pid = ::getpid();  // a forked child's exit is not this process's
} wait_at_exit;

}  // namespace

void RetireStore::operator()(StoreServer* store) const {
  std::unique_ptr<StoreServer> s(store);
  if (s->forked_copy()) return;  // its destructor only lets go
  s->retire(host_rank);
  std::vector<std::unique_ptr<StoreServer>> now;
  {
    std::lock_guard lk(retired().mu);
    auto& all = retired().stores;
    // Stores whose peers are all gone have stopped: free them.
    std::erase_if(all, [](auto& r) { return r->wait_retired(Clock::now(), nullptr); });
    if (!retired().exited) {
      all.push_back(std::move(s));
      return;
    }
    now.push_back(std::move(s));
  }
  wait_for_peers(std::move(now));
}

HostedStore host_store(int host_rank, const std::string& bind_host, int port, const auth::Key& key) {
  return HostedStore(new StoreServer(bind_host, port, key), RetireStore{host_rank});
}

}  // namespace kolo::rdv
