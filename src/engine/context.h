// What a Communicator holds: its place in the job, the rendezvous store, the
// backend that runs the algorithms and the engine that orders them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collectives/backend.h"
#include "engine/engine.h"
#include "rendezvous/store.h"

namespace kolo::detail {

struct Context {
  // A subgroup keeps its parent alive (with the store that the world's rank 0
  // may host). Declared first: destroyed after everything that uses the store.
  std::shared_ptr<Context> parent;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;  // this rank's host, hosts numbered by their lowest rank
  int cross_size = 1;  // hosts in the job
  std::unique_ptr<rdv::StoreServer> hosted_store;  // rank 0's, when no launcher hosts one
  std::unique_ptr<rdv::StoreClient> store;
  std::unique_ptr<collectives::Backend> backend;
  std::string prefix;  // this communicator's key space in the store
  std::string job_id;  // the launcher's job id (names shared-memory files)
  std::string launcher;  // which launcher's variables init() read, for the log
  // World rank of each rank of a subgroup (Communicator::split); null for the world.
  std::shared_ptr<const std::vector<int>> world;
  int splits = 0;  // subgroups made from this communicator so far: names the next one's keys
  std::uint64_t seq = 0;  // collectives run so far (touched by the engine's running op only)
  Engine engine;  // declared last: destroyed first, so queued work finishes before the backend goes

  Work make_work(std::shared_ptr<WorkState> s) { return Work(std::move(s)); }

  // "rank 3", or in a subgroup "rank 1 (world rank 3)", for messages.
  std::string name(int r) const;
  int world_rank(int r) const { return world ? (*world)[r] : r; }

  // A collective failed on this rank. A first-hand failure (mismatch, bad
  // state) is posted to the store for the others; a consequence (a peer hung
  // up or aborted) is explained with what the peers posted. Then the backend
  // aborts so that peers waiting on us fail now, and the error is rethrown.
  [[noreturn]] void fail_collective(const Error& e, bool first_hand);

 private:
  // How long a rank that timed out waits for the others to say where they are.
  static constexpr int kRollCallMs = 2000;
  std::string roll_call(const std::string& msg);
};

}  // namespace kolo::detail
