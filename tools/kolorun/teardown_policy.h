// How kolorun stops a job, written once for both of its loops over children:
// the ranks of one host (supervisor.cc: waitid, process groups) and the
// agents of a multi-host job (host_job.cc: 'X' frames, stop frames). Each
// loop keeps its own mechanics; this holds what they must agree on.
//
//   - The first event that stops the job (a rank's failure, a lost host, a
//     signal to kolorun, --timeout) wins: its exit code is the job's and it
//     alone is reported as "(first failure)". Later events change neither.
//   - Stopping starts the grace period: the children got SIGTERM (or
//     kolorun's signal) and are left that long to end.
//   - Then, or at once when told to (a second Ctrl-C, a lost launcher), the
//     loop escalates to SIGKILL, once.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace kolorun {

class TeardownPolicy {
 public:
  using Clock = std::chrono::steady_clock;

  // From the first stop to SIGKILL: grace_s (--grace-period), plus `slack`
  // (a host job's: the time its agents may take beyond their own grace period).
  explicit TeardownPolicy(double grace_s, Clock::duration slack = Clock::duration::zero());

  // An event that stops the job with exit code `code`. True when it is the
  // first: the caller reports it and stops the children. False when the job
  // is stopping already: nothing changes.
  bool stop(int code);
  bool stopping() const { return code_.has_value(); }
  int exit_code() const { return code_.value_or(0); }

  // When the grace period ends; none when not stopping or already escalated.
  std::optional<Clock::time_point> kill_deadline() const;
  // Stopping, not escalated yet, and the grace period is over.
  bool grace_over(Clock::time_point now) const;
  // Escalates (the caller sends SIGKILL): true the first time only.
  bool escalate();

 private:
  Clock::duration grace_;
  std::optional<int> code_;
  Clock::time_point deadline_;
  bool escalated_ = false;
};

// A child's end as waitid(2) gives it (si_code: CLD_EXITED, CLD_KILLED or
// CLD_DUMPED; si_status: its code or signal), in kolorun's words.
struct ChildEnd {
  int how = 0;
  int status = 0;
  bool failed() const;
  // The job's exit code when this end fails it: the code, or 128+signal.
  int exit_code() const;
  // "exited with code 7", "was killed by signal 9 (SIGKILL) (core dumped)".
  std::string text() const;
};

// "3 ranks", "1 host".
std::string plural(std::size_t n, const char* what);

// The first failure's report: "TEXT (first failure); stopping the other 3
// ranks" (without the stopping when no other rank runs).
std::string first_failure(const std::string& text, std::size_t others);

// "timeout after 5 s; stopping 4 ranks".
std::string timeout_text(double timeout_s, std::size_t running);

}  // namespace kolorun
