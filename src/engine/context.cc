#include "engine/context.h"

#include <chrono>
#include <thread>

#include "core/error.h"

namespace kolo::detail {

void Context::fail_collective(const Error& e, bool first_hand) {
  std::string msg = e.what();
  if (store) {
    try {
      if (first_hand) {
        store->set(fmt::format("{}/error/{}", prefix, rank), msg);
      } else {
        // The peer posts its error before it aborts; a crashed peer posts
        // nothing, so look only briefly.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
        std::string causes;
        do {
          for (int q = 0; q < size; ++q) {
            const std::string key = fmt::format("{}/error/{}", prefix, q);
            if (q != rank && store->check({key}))
              causes += "\n  reported by rank " + std::to_string(q) + ": " +
                        store->get(key, std::chrono::milliseconds(1000));
          }
          if (!causes.empty()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } while (std::chrono::steady_clock::now() < until);
        msg += causes;
        // Posted too (before the abort below): a peer that sees this rank
        // hang up next finds why, and through it the rank that was really
        // lost (in a TCP ring only the dead rank's neighbours see it go).
        store->set(fmt::format("{}/error/{}", prefix, rank), msg);
      }
    } catch (const std::exception&) {
      // The store may be gone with the rank that hosted it: report what we know.
    }
  }
  if (backend) backend->abort();
  if (first_hand) throw Error(msg);
  throw IoError(msg);
}

}  // namespace kolo::detail
