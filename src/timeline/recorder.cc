// The recorder's buffers: one per recording thread, taken by the writer
// (recorder.h says why it is built this way).
#include "timeline/recorder.h"

#include <mutex>
#include <utility>

namespace kolo::detail::timeline {

std::atomic<bool> recording{false};

namespace {

// One per thread that ever recorded. The registry keeps a buffer after its
// thread exits, until the writer has taken its events.
struct Buffer {
  std::mutex mu;
  std::vector<Event> events;
  int thread = 0;
  std::atomic<bool> orphan{false};
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<Buffer>> buffers;
  int threads = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during exit
  return *r;
}

// Registers this thread's buffer on first use; marks it orphan at thread exit.
struct Holder {
  std::shared_ptr<Buffer> b;
  Buffer& get() {
    if (!b) {
      b = std::make_shared<Buffer>();
      auto& r = registry();
      std::lock_guard lk(r.mu);
      b->thread = r.threads++;
      r.buffers.push_back(b);
    }
    return *b;
  }
  ~Holder() {
    if (b) b->orphan = true;
  }
};

thread_local Holder holder;

}  // namespace

void record(Event&& e) {
  Buffer& b = holder.get();
  e.thread = b.thread;
  std::lock_guard lk(b.mu);
  b.events.push_back(std::move(e));
}

void take_events(std::vector<Event>& out) {
  auto& r = registry();
  std::lock_guard lk(r.mu);
  for (auto& b : r.buffers) {
    std::lock_guard blk(b->mu);
    for (auto& e : b->events) out.push_back(std::move(e));
    b->events.clear();
  }
  std::erase_if(r.buffers, [](const std::shared_ptr<Buffer>& b) { return b->orphan && b->events.empty(); });
}

}  // namespace kolo::detail::timeline
