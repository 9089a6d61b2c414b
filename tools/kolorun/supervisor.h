// Supervision of a running job: one poll loop that relays the ranks' output,
// notices ranks exiting (SIGCHLD), kolorun's own signals and the job's
// deadline, and tears the job down when it has to.
//
// Teardown: the first rank to exit non-zero or by a signal fails the job.
// Every rank's process group then gets SIGTERM, and SIGKILL once the grace
// period has passed; the loop keeps relaying output meanwhile, so the last
// words of the dying ranks (often the real error) are not lost. SIGINT,
// SIGTERM or SIGHUP to kolorun and --timeout stop the job the same way; a
// second signal while stopping skips the rest of the grace period.
//
// Exit code: the failing rank's code (128+signal when it died by a signal),
// 128+signal after kolorun was signalled, 124 after --timeout, 0 when every
// rank exited 0.
#pragma once

#include <vector>

#include "spawn.h"

namespace kolorun {

struct SupervisorOptions {
  bool tag_output = true;
  double timeout_s = 0;  // 0: none
  double grace_s = 3;
};

// Runs the job to its end and returns kolorun's exit code. Takes ownership of
// the ranks' pipes and of signal_fd (see signals.h).
int supervise(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts);

// Stops ranks already started when the job cannot start completely (a later
// rank failed to exec): SIGTERM, SIGKILL after the grace period, output
// relayed meanwhile. Returns exit_code.
int abort_started(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts,
                  int exit_code);

}  // namespace kolorun
