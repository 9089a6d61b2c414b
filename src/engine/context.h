// What a Communicator holds: its place in the job, the rendezvous store, the
// backend that runs the algorithms and the engine that orders them.
#pragma once

#include <memory>
#include <string>

#include "collectives/backend.h"
#include "engine/engine.h"
#include "rendezvous/store.h"

namespace kolo::detail {

struct Context {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::unique_ptr<rdv::StoreServer> hosted_store;  // rank 0's, when no launcher hosts one
  std::unique_ptr<rdv::StoreClient> store;
  std::unique_ptr<collectives::Backend> backend;
  Engine engine;  // declared last: destroyed first, so queued work finishes before the backend goes

  Work make_work(std::shared_ptr<WorkState> s) { return Work(std::move(s)); }
};

}  // namespace kolo::detail
