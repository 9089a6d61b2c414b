#include "teardown_policy.h"

#include <sys/wait.h>

#include <fmt/format.h>

#include "signals.h"

namespace kolorun {

TeardownPolicy::TeardownPolicy(double grace_s, Clock::duration slack)
    : grace_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s)) + slack) {}

bool TeardownPolicy::stop(int code) {
  if (code_) return false;
  code_ = code;
  deadline_ = Clock::now() + grace_;
  return true;
}

std::optional<TeardownPolicy::Clock::time_point> TeardownPolicy::kill_deadline() const {
  if (!code_ || escalated_) return std::nullopt;
  return deadline_;
}

bool TeardownPolicy::grace_over(Clock::time_point now) const { return code_ && !escalated_ && now >= deadline_; }

bool TeardownPolicy::escalate() {
  if (escalated_) return false;
  escalated_ = true;
  return true;
}

bool ChildEnd::failed() const { return how != CLD_EXITED || status != 0; }

int ChildEnd::exit_code() const { return how == CLD_EXITED ? status : 128 + status; }

std::string ChildEnd::text() const {
  if (how == CLD_EXITED) return fmt::format("exited with code {}", status);
  return fmt::format("was killed by signal {} ({}){}", status, signal_name(status),
                     how == CLD_DUMPED ? " (core dumped)" : "");
}

std::string plural(std::size_t n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); }

std::string first_failure(const std::string& text, std::size_t others) {
  if (others == 0) return fmt::format("{} (first failure)", text);
  return fmt::format("{} (first failure); stopping the other {}", text, plural(others, "rank"));
}

std::string timeout_text(double timeout_s, std::size_t running) {
  return fmt::format("timeout after {:g} s; stopping {}", timeout_s, plural(running, "rank"));
}

}  // namespace kolorun
