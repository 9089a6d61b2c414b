// kolo::init(): find out who we are, meet the other ranks at the rendezvous
// store, learn which of them share this host, and build the backend.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "collectives/backend.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/context.h"
#include "rendezvous/discovery.h"

namespace kolo {

namespace {

// Ranks with the same identity share a kernel, hence /dev/shm.
std::string host_identity() {
  std::string host = config::env_str("KOLO_HOSTNAME", "");
  if (host.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    host = buf;
  }
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  return host + "/" + boot_id;
}

// Waits until every rank has set <name>/<rank>; the error lists the ranks
// that never arrived (not just store keys).
void wait_for_ranks(rdv::StoreClient& store, const std::string& name, int size,
                    std::chrono::milliseconds timeout) {
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

void store_barrier(rdv::StoreClient& store, const std::string& name, int rank, int size) {
  store.set(fmt::format("{}/{}", name, rank), "1");
  wait_for_ranks(store, name, size, std::chrono::milliseconds(config::rendezvous_timeout_ms()));
}

}  // namespace

Communicator init() {
  const rdv::Discovery d = rdv::discover(rdv::current_environment());
  // Under kolorun stdout is a pipe to the launcher's relay: flush by line so
  // that ranks' output (and progress bars) show up as it is written.
  if (d.source == "kolo" && !isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  set_log_rank(d.rank);
  auto ctx = std::make_shared<detail::Context>();
  ctx->rank = d.rank;
  ctx->size = d.size;
  if (d.size == 1) {
    ctx->backend = collectives::make_self_backend();
  } else {
    // Each init() of a job gets its own key space (all ranks call init() equally often).
    static int communicators = 0;
    const std::string prefix = fmt::format("kolo/comm{}", communicators++);
    ctx->prefix = prefix;
    ctx->store = rdv::connect_store(d, ctx->hosted_store);
    auto& store = *ctx->store;
    const auto timeout = std::chrono::milliseconds(config::rendezvous_timeout_ms());

    const std::string me = host_identity();
    store.set(fmt::format("{}/host/{}", prefix, d.rank), me);
    wait_for_ranks(store, prefix + "/host", d.size, timeout);
    int local_rank = 0, local_size = 0;
    for (int r = 0; r < d.size; ++r) {
      const bool same = store.get(fmt::format("{}/host/{}", prefix, r), timeout) == me;
      local_size += same;
      local_rank += same && r < d.rank;
    }
    ctx->local_rank = local_rank;
    ctx->local_size = local_size;

    const bool one_host = local_size == d.size;
    const std::string want = config::transport();
    bool shm = false;
    if (want == "auto") {
      shm = one_host;
    } else if (want == "shm") {
      if (!one_host)
        fail("KOLO_TRANSPORT=shm needs every rank on one host, but only {} of {} share this one",
             local_size, d.size);
      shm = true;
    } else if (want != "tcp") {
      fail("KOLO_TRANSPORT={} is not a transport (auto, shm, tcp)", want);
    }
    ctx->backend = shm ? collectives::make_shm_backend(store, prefix, d.job_id, d.rank, d.size)
                       : collectives::make_tcp_backend(store, prefix, d.rank, d.size);
    store_barrier(store, prefix + "/ready", d.rank, d.size);
    log(LogLevel::Info, "rank {} of {} ({} local), transport {}, launcher {}", d.rank, d.size,
        local_size, ctx->backend->name(), d.source);
  }
  Communicator comm;
  comm.ctx_ = std::move(ctx);
  return comm;
}

}  // namespace kolo
