// What a Communicator holds: its place in the job, the rendezvous store, the
// backend that runs the algorithms and the engine that orders them.
//
// Which failures a communicator survives. A collective whose ranks
// disagree (different op, dtype, count or root at the same position) is
// caught where ranks first compare fingerprints, before anything a peer sent
// is used. When EVERY rank caught it there (each posts its verdict for that
// collective to the store and reads everyone's; the first rank done posts the
// decision, which every rank follows), nothing of the call was
// used anywhere: each rank drops its transport, builds a fresh one in a new
// key space of the store (new shared-memory segment, new connections, so
// nothing left in the old one can be read by mistake) and throws
// RejectedError; the communicator remains usable and the next collective
// runs as if the rejected one had never been called. That is always the case
// on one host (shared memory: every rank sees every rank's fingerprint);
// over TCP only where every rank receives from a disagreeing peer (two ranks
// allreducing different counts do; a broadcast's root receives nothing).
// Argument errors are thrown before a collective is queued and leave
// nothing behind either.
// Anything else — a peer that died, a timeout, a mismatch only some ranks saw
// (those waiting on a peer that stopped see it leave), a mismatch with a rank
// that already went on to its next collective — may have moved data (a rank
// that caught a mismatch waits kVerdictMs for the verdicts before it aborts,
// so a peer that saw nothing fails then): the backend aborts, every
// rank gets the error, and the communicator is unusable for good (as NCCL's
// abort). Forming a new one (shutdown() then init() in Python,
// kolo::init() in C++) works in the same processes: each init() takes its
// own key space and segment name.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/backend.h"
#include "core/rejected.h"
#include "engine/engine.h"
#include "comm/named_channel.h"
#include "rendezvous/hosted_store.h"
#include "rendezvous/store.h"
#include "timeline/recorder.h"
#include "transport/gpu.h"

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
  // Rank 0's, when no launcher hosts one. Declared before the store client,
  // the backend and the engine: when the communicator goes it is retired
  // (rendezvous/hosted_store.h) after this rank's transport has closed, so
  // that a peer waiting on this rank in a collective fails rather than holds it.
  rdv::HostedStore hosted_store;
  std::unique_ptr<rdv::StoreClient> store;
  std::unique_ptr<collectives::Backend> backend;
  // The data plane of collectives on CUDA memory, made at the first one. Its
  // tickets in the callers' streams are taken together with the collective's
  // place in the engine's queue, under gpu_issue (transport/gpu.h).
  std::unique_ptr<gpu::Plane> gpu;
  std::mutex gpu_issue;
  std::string prefix;  // this communicator's key space in the store (of this backend generation)
  std::string base_prefix;  // the key space it was formed in; generations live below
  int generation = 0;       // backends built after a rejected collective
  // Builds the backend in a key space (the transport chosen when it formed, kept for rebuilds),
  // through a store client: the context's own, or the named channel's (comm/named_channel.h).
  std::function<std::unique_ptr<collectives::Backend>(rdv::StoreClient& store, const std::string& prefix)>
      make_backend;
  std::string job_id;  // the launcher's job id (names shared-memory files)
  std::string launcher;  // which launcher's variables init() read, for the log
  int elastic_generation = -1;  // the elastic generation it was formed in (rendezvous/elastic.h); -1: none
  // World rank of each rank of a subgroup (Communicator::split); null for the world.
  std::shared_ptr<const std::vector<int>> world;
  int splits = 0;  // subgroups made from this communicator so far: names the next one's keys
  std::uint64_t seq = 0;  // collectives run so far (touched by the engine's running op only)
  // How the timeline names this communicator (made on its first recorded collective).
  std::shared_ptr<const timeline::CommInfo> timeline_comm;
  // Set while the timeline session started on this communicator runs: its
  // destructor ends the session (timeline/recorder.h). Declared after the store
  // and before the engine: it runs when every queued collective has finished,
  // while the store rank 0 may host is still up.
  std::unique_ptr<timeline::Attachment> timeline;
  // Named operations (comm/named_channel.h), made at the first one.
  std::mutex named_mu;
  std::unique_ptr<NamedChannel> named;
  NamedChannel& named_channel();
  // The data plane's last word (transport/gpu.h), through the store.
  gpu::Farewell gpu_farewell();
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
  // The store part of a failure (fail_collective's without the verdict): posts
  // a first-hand error, or explains a consequence with what peers posted;
  // returns the message. For the named channel, whose failures are its own.
  std::string report_failure(const Error& e, bool first_hand);
  // The named channel failed: the ordered path fails too (marks the engine
  // broken; peers waiting on this rank there fail now).
  void abort_ordered(const std::string& reason);
  // This rank caught a mismatch at the fingerprint check. If every rank did,
  // rebuilds the backend and throws RejectedError; otherwise fail_collective.
  [[noreturn]] void reject_collective(const MismatchError& e);

 private:
  // How long a rank that caught a mismatch waits for every rank's verdict:
  // ranks that caught it too answer at once, others only after their own failure.
  static constexpr int kVerdictMs = 5000;
  void post_verdict(const char* verdict);
  // How long a rank that timed out waits for the others to say where they are.
  static constexpr int kRollCallMs = 2000;
  std::string roll_call(const std::string& msg);
};

}  // namespace kolo::detail
