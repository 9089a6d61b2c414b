// kolo::init(): find out who we are, meet the other ranks at the rendezvous
// store, and connect to them (connect.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "collectives/backend.h"
#include "comm/connect.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "comm/context.h"
#include "rendezvous/discovery.h"
#include "rendezvous/elastic.h"

namespace kolo {

namespace {

// An elastic worker learns its rank and size from the newest generation
// that lists it (rendezvous/elastic.h); each generation is its own key space.
void join_generation(rdv::Discovery& d, detail::Context& ctx) {
  static int last_generation = -1;  // the generation of this process's previous init()
  set_log_rank(-1);
  const rdv::elastic::Place p = rdv::elastic::join(*ctx.store, d.worker_id, last_generation,
                                                   rdv::Millis(config::elastic_timeout_ms()));
  last_generation = p.generation;
  d.rank = p.rank;
  d.size = p.size;
  ctx.elastic_generation = p.generation;
  ctx.prefix = rdv::elastic::prefix(p.generation);
}

}  // namespace

Communicator init() {
  rdv::Discovery d = rdv::discover(rdv::current_environment());
  // Under kolorun stdout is a pipe to the launcher's relay: flush by line so
  // that ranks' output (and progress bars) show up as it is written.
  if (d.source == "kolo" && !isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto ctx = std::make_shared<detail::Context>();
  if (!d.worker_id.empty()) {
    ctx->store = rdv::connect_store(d, ctx->hosted_store);
    join_generation(d, *ctx);
  }
  set_log_rank(d.rank);
  ctx->rank = d.rank;
  ctx->size = d.size;
  ctx->job_id = d.job_id;
  ctx->launcher = d.source;
  if (d.size == 1) {
    ctx->backend = collectives::make_self_backend();
  } else {
    if (d.worker_id.empty()) {
      // Each init() of a job gets its own key space (all ranks call init() equally often).
      static int communicators = 0;
      ctx->prefix = fmt::format("kolo/comm{}", communicators++);
      ctx->store = rdv::connect_store(d, ctx->hosted_store);
    }
    detail::connect(*ctx);
  }
  if (!d.worker_id.empty()) rdv::elastic::mark_formed(*ctx->store, d.worker_id, ctx->elastic_generation);
  Communicator comm;
  comm.ctx_ = std::move(ctx);
  if (const std::string path = config::timeline_path(); !path.empty()) timeline::start(comm, path);
  return comm;
}

namespace elastic {

bool enabled() {
  return !config::worker_id().empty();
}

int generation(const Communicator& comm) { return comm.ctx_ ? comm.ctx_->elastic_generation : -1; }

int latest_generation(const Communicator& comm) {
  if (!comm.ctx_ || comm.ctx_->elastic_generation < 0) return -1;
  return rdv::elastic::latest(*comm.ctx_->store);
}

}  // namespace elastic

}  // namespace kolo
