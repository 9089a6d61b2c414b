// kolo::init(): find out who we are, meet the other ranks at the rendezvous
// store, and connect to them (connect.h).
#include <unistd.h>

#include <cstdio>

#include "collectives/backend.h"
#include "connect.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/context.h"
#include "rendezvous/discovery.h"

namespace kolo {

Communicator init() {
  const rdv::Discovery d = rdv::discover(rdv::current_environment());
  // Under kolorun stdout is a pipe to the launcher's relay: flush by line so
  // that ranks' output (and progress bars) show up as it is written.
  if (d.source == "kolo" && !isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  set_log_rank(d.rank);
  auto ctx = std::make_shared<detail::Context>();
  ctx->rank = d.rank;
  ctx->size = d.size;
  ctx->job_id = d.job_id;
  ctx->launcher = d.source;
  if (d.size == 1) {
    ctx->backend = collectives::make_self_backend();
  } else {
    // Each init() of a job gets its own key space (all ranks call init() equally often).
    static int communicators = 0;
    ctx->prefix = fmt::format("kolo/comm{}", communicators++);
    ctx->store = rdv::connect_store(d, ctx->hosted_store);
    detail::connect(*ctx);
  }
  Communicator comm;
  comm.ctx_ = std::move(ctx);
  if (const std::string path = config::timeline_path(); !path.empty()) timeline::start(comm, path);
  return comm;
}

}  // namespace kolo
