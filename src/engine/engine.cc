#include "engine/engine.h"

#include "core/error.h"
#include "core/rejected.h"
#include "core/overlap.h"

namespace kolo::detail {

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool Engine::broken() {
  std::lock_guard lk(mu_);
  return !broken_.empty();
}

void Engine::poison(const std::string& why) {
  std::lock_guard lk(mu_);
  if (broken_.empty()) broken_ = why;
}

void Engine::check_usable() {
  if (!broken_.empty())
    throw Error(rank_prefix() + "communicator is unusable after an earlier failure: " + broken_);
}

void Engine::note_failure(std::exception_ptr err) {
  if (!broken_.empty()) return;
  try {
    std::rethrow_exception(err);
  } catch (const RejectedError&) {
    return;  // every rank rejected it and the backend was rebuilt: still usable
  } catch (const std::exception& e) {
    broken_ = e.what();
  } catch (...) {
    broken_ = "unknown error";
  }
}

std::shared_ptr<WorkState> Engine::submit(std::function<void()> op) {
  auto state = std::make_shared<WorkState>();
  {
    std::lock_guard lk(mu_);
    check_usable();
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
    queue_.emplace_back(std::move(op), state);
  }
  cv_.notify_all();
  return state;
}

void Engine::finish_inline(std::exception_ptr err) {
  {
    std::lock_guard lk(mu_);
    busy_ = false;
    if (err) note_failure(err);
  }
  cv_.notify_all();
}

void Engine::loop() {
  overlaps_caller = true;  // its callers go on working (core/overlap.h)
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;  // stop_ and nothing left to run
    auto [op, state] = std::move(queue_.front());
    queue_.pop_front();
    std::exception_ptr err;
    if (!broken_.empty()) {
      err = std::make_exception_ptr(
          Error(rank_prefix() + "communicator is unusable after an earlier failure: " + broken_));
    } else {
      busy_ = true;
      lk.unlock();
      try {
        op();
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      busy_ = false;
      if (err) note_failure(err);
    }
    {
      std::lock_guard slk(state->mu);
      state->done = true;
      state->error = err;
    }
    state->cv.notify_all();
    cv_.notify_all();
  }
}

void Engine::wait(WorkState& s) {
  std::unique_lock lk(s.mu);
  s.cv.wait(lk, [&] { return s.done; });
  if (s.error) std::rethrow_exception(s.error);
}

}  // namespace kolo::detail
