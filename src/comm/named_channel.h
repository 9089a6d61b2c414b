// Named operations, negotiated as Horovod's controller negotiates them.
//
// Unnamed collectives are matched by call order (engine/engine.h). A named
// one (Horovod's name=, a TF op) may be issued in a different order on each
// rank; this channel agrees one order and runs each as soon as every rank has
// issued it. It has its own transport (a second backend, built in the
// communicator's key space under "named" when the first named operation
// runs), so named and unnamed collectives never wait for each other and the
// ordered path keeps its latency.
//
// Negotiation is in rounds, run by one thread per channel on every rank in
// lockstep. A round is one allgather of a fixed header and a bitset over the
// name table (engine/name_table.h): the names this rank has pending that the
// table knows (one bit each, the response cache), plus the byte length of
// the names it does not know yet; only when some rank has new names does a
// second allgatherv carry them. Every rank then settles the round alike and
// runs, in slot order, the names every rank has issued. A repeated step (the
// same names) therefore costs one small allgather per round, and one round
// covers every operation issued by then.
//
// Rounds run while any rank has something pending; with nothing pending
// anywhere, every rank's thread sleeps until its caller issues a named
// operation, and the first round then waits in the allgather for every rank
// to issue one. A round that ran nothing is followed by the next after at
// most KOLO_NAMED_CYCLE_US (Horovod's cycle time) or at once when this rank
// issues something new.
//
// A fresh operation is announced when its caller waits on (or tests) any
// named operation of the communicator, or KOLO_NAMED_CYCLE_US after it was
// issued, whichever is first: ops issued together go in one round, and a
// second operation with a name still in flight is caught on the rank that
// issued it (DuplicateNameError). As with Horovod's queue, a name issued twice
// back to back is caught only while the first is in flight: a caller held off
// the CPU for longer than a cycle between the two calls may find the first
// completed and the second then runs as a new operation.
//
// Ranks that issue one name with different calls (op, dtype, count, shape,
// root) get an error for it on every rank before any data moves; the
// communicator stays usable. A failure while running (a peer died, a
// timeout) fails the whole communicator, as on the ordered path. A name
// pending longer than KOLO_STALL_WARN_MS logs which ranks have not issued it;
// longer than KOLO_TIMEOUT_MS, the communicator fails naming them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/backend.h"
#include "engine/engine.h"
#include "engine/name_table.h"
#include "rendezvous/store.h"

namespace kolo::detail {

struct Context;

class NamedChannel {
 public:
  explicit NamedChannel(Context& c);
  // Fails what is still pending (its peers may never issue it) and stops.
  ~NamedChannel();

  // Queues `body` under `name`; throws DuplicateNameError (on this rank only,
  // nothing queued) when an operation of that name is in flight here.
  std::shared_ptr<WorkState> submit(const std::string& name, const Fingerprint& fp,
                                    std::function<void(collectives::Backend&, const Fingerprint&)> body);
  // Horovod's join(): while on, this rank takes part in every named allreduce
  // the other ranks issue, with zeros, and named operations of other kinds
  // fail on the ranks that issued them (kolo.h's Communicator::set_joined).
  // Leaving is collective: it returns once a round has found every rank leaving.
  void set_joined(bool on);
  // The communicator failed elsewhere: make a round waiting on peers fail now.
  void abort(const std::string& reason);

 private:
  using Clock = std::chrono::steady_clock;
  struct Op {
    Fingerprint fp;
    std::function<void(collectives::Backend&, const Fingerprint&)> body;
    std::shared_ptr<WorkState> state;
    Clock::time_point issued;
    std::uint64_t order;     // issue order on this rank
    bool announced = false;  // taken into the rounds
    Clock::time_point warned;  // last stall warning about it
  };
  // Lets a waiting caller announce what is held (WorkState::on_wait): shared,
  // so that a Work outliving the communicator finds it still there.
  struct Hub {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
  };

  void loop();
  void round(std::vector<std::string>& mine);
  void await_peers(const std::vector<std::string>& mine);
  void run(const std::string& name, Op& op);
  void complete(const std::string& name, std::exception_ptr err);
  void fail_all(std::exception_ptr err);
  void check_stalls(const Settled& s);
  std::string describe_waiting(const Settled::Waiting& w) const;

  Context& c_;
  std::shared_ptr<Hub> hub_;
  std::map<std::string, Op> ops_;  // in flight on this rank; guarded by hub_->mu
  std::uint64_t issued_ = 0;
  bool stop_ = false;
  bool joined_ = false;
  bool announce_ = false;  // run a round now (joined_ changed)
  bool leaving_ = false;    // left join(); until a round finds every rank leaving (set_joined)
  std::vector<bool> seen_leaving_;  // whom the last round found leaving, while this rank leaves
  bool in_round_ = false;     // the thread is inside the transport
  bool anyone_pending_ = false;  // the last round left something pending on some rank
  std::string broken_;
  // The channel's own connection to the store, for its transport's build
  // (and whatever that transport asks of the store later). A store client
  // serves one request at a time, and a build waits in the store for the
  // peers (up to the rendezvous timeout): on the context's client it held up
  // the ordered path's store calls on this rank meanwhile — the verdicts of a
  // rejected collective among them, so that one rank gave up on a rejection
  // its peer had seen agreed, and rebuilt alone (Horovod's join tests).
  std::unique_ptr<rdv::StoreClient> store_;
  std::unique_ptr<collectives::Backend> backend_;
  NameTable table_;
  std::uint64_t seq_ = 0;  // this channel's collectives so far (rounds and operations)
  std::chrono::microseconds cycle_;
  std::int64_t stall_warn_ms_, timeout_ms_;
  std::thread worker_;
};

}  // namespace kolo::detail
