// The engine: runs a communicator's collectives one at a time, in the order
// they were issued, on a background thread (asynchronous calls) or on the
// caller's thread (blocking calls, when nothing is queued — it saves the
// thread hand-off, which would dominate a small message's latency).
//
// A collective that fails leaves the peers in an unknown position in the
// stream, so the engine marks itself broken and every later call fails at
// once with the first error (as NCCL's communicator abort does) — except a
// RejectedError: every rank refused that call before any data moved and the
// backend was rebuilt (comm/context.h says when).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "kolo/kolo.h"

namespace kolo::detail {

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  // Called before a caller waits or polls: the named channel announces the
  // operations it holds (comm/named_channel.h). Empty on the ordered path.
  std::function<void()> on_wait;
};

class Engine {
 public:
  Engine() = default;
  ~Engine();

  // Queues op; the returned state completes when it has run.
  std::shared_ptr<WorkState> submit(std::function<void()> op);

  // Runs op on this thread after everything queued before it; rethrows its error.
  template <class F>
  void run(F&& op) {
    {
      std::unique_lock lk(mu_);
      check_usable();
      if (!queue_.empty() || busy_) {
        lk.unlock();
        auto state = submit(std::function<void()>(std::forward<F>(op)));
        wait(*state);
        return;
      }
      busy_ = true;
    }
    std::exception_ptr err;
    try {
      op();
    } catch (...) {
      err = std::current_exception();
    }
    finish_inline(err);
    if (err) std::rethrow_exception(err);
  }

  static void wait(WorkState& s);
  // Throws the earlier failure, if there was one.
  void check() {
    std::lock_guard lk(mu_);
    check_usable();
  }

  // A collective has failed: every later call fails (the peers may be gone).
  bool broken();
  // Another part of the communicator (the named channel) failed: every later
  // call fails with `why`, as after a failed collective.
  void poison(const std::string& why);

 private:
  void check_usable();  // caller holds mu_
  void finish_inline(std::exception_ptr err);
  void note_failure(std::exception_ptr err);  // caller holds mu_
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<WorkState>>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::string broken_;  // the first failure, once there was one
  std::thread worker_;
};

}  // namespace kolo::detail
