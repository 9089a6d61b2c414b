#include "engine/engine.h"
#include "core/error.h"

namespace kolo {

void Work::wait() {
  if (!state_) fail("wait() on an empty kolo::Work");
  if (state_->on_wait) state_->on_wait();
  detail::Engine::wait(*state_);
}

bool Work::test() {
  if (!state_) fail("test() on an empty kolo::Work");
  if (state_->on_wait) state_->on_wait();
  std::lock_guard lk(state_->mu);
  if (state_->done && state_->error) std::rethrow_exception(state_->error);
  return state_->done;
}

}  // namespace kolo
