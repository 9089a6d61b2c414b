// Starting one rank: fork/exec with the guarantees a launcher owes its ranks.
//
// Each rank leads a process group of its own, so that stopping a rank stops
// everything it started (a data loader, a shell pipeline) with one kill(-pgid).
// Each rank dies with kolorun (PR_SET_PDEATHSIG), even when kolorun itself is
// killed with SIGKILL and cannot clean up. stdin is /dev/null: N ranks reading
// one terminal would steal each other's input.
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kolorun {

// The command cannot be run at all (missing, not executable, bad format):
// a usage error, reported before or instead of starting the job.
class ExecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// PATH lookup as execvp(3) does it, done once in kolorun so that a typo is
// reported before any rank starts: a name containing '/' is taken as is,
// otherwise the first executable regular file named `cmd` in $PATH.
// Throws ExecError("cannot execute 'cmd': No such file or directory").
std::string resolve_executable(const std::string& cmd);

struct RankSpec {
  int rank = 0;
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] as the user typed it
  std::vector<std::string> env;   // "NAME=value"
  // Files to use as the rank's stdout/stderr; -1: a pipe that kolorun reads.
  int stdout_file = -1;
  int stderr_file = -1;
  // stdin a pipe kolorun writes (a host's agent reads its job there) instead
  // of /dev/null.
  bool stdin_pipe = false;
  // Sent to it when kolorun dies. The launching host's agent gets SIGTERM
  // instead: it must live long enough to kill what its ranks started.
  int death_signal = 9;  // SIGKILL
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;  // also the rank's process group id
  int stdout_pipe = -1;  // read ends (non-blocking, close-on-exec), -1 for files
  int stderr_pipe = -1;
  int stdin_pipe = -1;   // write end (close-on-exec), with RankSpec::stdin_pipe
};

// Starts the rank and returns once it has exec'd. Throws ExecError when exec
// fails in the child (reported through a close-on-exec pipe; the child is
// reaped), std::system_error when fork or pipe creation fails.
RankProcess spawn_rank(const RankSpec& spec);

}  // namespace kolorun
