#include "comm/context.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/rejected.h"
#include "rendezvous/hosts.h"

namespace kolo::detail {

std::string Context::name(int r) const {
  if (!world) return fmt::format("rank {}", r);
  return fmt::format("rank {} (world rank {})", r, (*world)[r]);
}

// After a timeout: every rank still waiting in the collective times out too
// and says so under waiting/<rank>; a rank that says nothing within the roll
// call (and posts no error) is not inside any collective: stopped, hung, or
// busy outside kolo. Over TCP this finds the culprit even for ranks whose
// own wait was on a neighbour that is itself waiting.
std::string Context::roll_call(const std::string& msg) {
  store->set(fmt::format("{}/waiting/{}", prefix, rank), msg);
  std::vector<bool> heard(static_cast<std::size_t>(size), false);
  heard[static_cast<std::size_t>(rank)] = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRollCallMs);
  for (;;) {
    bool all = true;
    for (int q = 0; q < size; ++q) {
      if (heard[q]) continue;
      heard[q] = store->check({fmt::format("{}/waiting/{}", prefix, q)}) ||
                 store->check({fmt::format("{}/error/{}", prefix, q)});
      all &= heard[q];
    }
    if (all || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string silent;
  int n = 0;
  for (int q = 0; q < size; ++q)
    if (!heard[q]) silent += (n++ ? ", " : " ") + name(q).substr(5);  // "3" or "1 (world rank 3)"
  if (n == 0) return "";
  return fmt::format("\n  unresponsive: {}{} (not waiting in any collective of this communicator and no "
                     "error posted within {} ms: stopped, hung, or busy outside kolo)",
                     n == 1 ? "rank" : "ranks", silent, kRollCallMs);
}

void Context::post_verdict(const char* verdict) {
  store->set(fmt::format("{}/verdict/{}/{}", prefix, seq, rank), verdict);
}

void Context::reject_collective(const MismatchError& e) {
  bool everyone = false;
  if (store && make_backend) {
    try {
      post_verdict("rejected");
      std::vector<std::string> keys;
      for (int q = 0; q < size; ++q) keys.push_back(fmt::format("{}/verdict/{}/{}", prefix, seq, q));
      // Polled: a store client's wait that times out reads as a lost store.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kVerdictMs);
      bool all_posted = store->check(keys);
      while (!all_posted && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        all_posted = store->check(keys);
      }
      everyone = all_posted;  // else a silent rank: not a clean rejection
      for (const auto& k : keys)
        if (everyone) everyone = store->get(k, std::chrono::milliseconds(0)) == "rejected";
      // One decision for every rank that rejected: the first to claim it
      // posts what it saw, and each follows that. Deciding alone, a rank
      // delayed past kVerdictMs gave up while its peers, seeing every
      // verdict, rebuilt the transport and waited for it in vain.
      const std::string decision = fmt::format("{}/decision/{}", prefix, seq);
      if (store->add(decision + "/claim", 1) == 1) store->set(decision, everyone ? "rebuild" : "fail");
      everyone = store->get(decision, std::chrono::milliseconds(kVerdictMs)) == "rebuild";
    } catch (const std::exception&) {
      everyone = false;  // the store is gone (with the rank that hosted it): not a clean rejection
    }
  }
  if (!everyone) fail_collective(e, true);
  std::string msg = e.what();
  try {
    backend.reset();
    prefix = fmt::format("{}/g{}", base_prefix, ++generation);
    backend = make_backend(*store, prefix);
    rdv::store_barrier(*store, prefix + "/ready", rank, size);
  } catch (const std::exception& rebuild) {
    throw Error(msg + "\n  every rank rejected this collective, but rebuilding the transport failed: " +
                rebuild.what());
  }
  throw RejectedError(msg + "\n  (every rank rejected this collective before any data moved; "
                      "the communicator remains usable)");
}

// Run from the plane's destructor, when the members declared after `gpu`
// (the key spaces, the engine) are gone: it keeps copies, and the store,
// declared before, is still there. A failure any rank posted (report_failure)
// ends the wait at once.
gpu::Farewell Context::gpu_farewell() {
  return [store = store.get(), rank = rank, size = size, name = base_prefix + "/gpu-unmapped",
          errors = prefix + "/error"] {
    return rdv::store_barrier_unless(*store, name, errors, rank, size, std::chrono::milliseconds(config::peer_timeout_ms()));
  };
}

NamedChannel& Context::named_channel() {
  std::lock_guard lk(named_mu);
  if (!named) named = std::make_unique<NamedChannel>(*this);
  return *named;
}

void Context::abort_ordered(const std::string& reason) {
  engine.poison(reason);
  if (backend) backend->abort(reason);
}

void Context::fail_collective(const Error& e, bool first_hand) {
  if (store) {
    try {
      post_verdict("failed");
    } catch (const std::exception&) {
      // The store may be gone with the rank that hosted it.
    }
  }
  const std::string msg = report_failure(e, first_hand);
  if (backend) backend->abort(msg);
  {
    std::lock_guard lk(named_mu);
    if (named) named->abort(msg);
  }
  if (first_hand) throw Error(msg);
  throw IoError(msg);
}

std::string Context::report_failure(const Error& e, bool first_hand) {
  std::string msg = e.what();
  if (store) {
    try {
      if (first_hand) {
        store->set(fmt::format("{}/error/{}", prefix, rank), msg);
      } else {
        if (dynamic_cast<const TimeoutError*>(&e) != nullptr) msg += roll_call(msg);
        // The peer posts its error before it aborts; a crashed peer posts
        // nothing, so look only briefly.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        std::string causes;
        do {
          for (int q = 0; q < size; ++q) {
            const std::string key = fmt::format("{}/error/{}", prefix, q);
            if (q == rank || !store->check({key})) continue;
            const std::string report = store->get(key, std::chrono::milliseconds(1000));
            // A shared-memory peer's abort already carries its reason.
            if (msg.find(report) == std::string::npos)
              causes += "\n  reported by " + name(q) + ": " + report;
          }
          if (!causes.empty()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } while (std::chrono::steady_clock::now() < until);
        msg += causes;
        // Posted too (before the abort below): a peer that sees this rank
        // hang up next finds why, and through it the rank that was really
        // lost (in a TCP ring only the dead rank's neighbours see it go).
        store->set(fmt::format("{}/error/{}", prefix, rank), msg);
      }
    } catch (const std::exception&) {
      // The store may be gone with the rank that hosted it: report what we know.
    }
  }
  return msg;
}

}  // namespace kolo::detail
