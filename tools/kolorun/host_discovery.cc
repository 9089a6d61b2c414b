#include "host_discovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "signals.h"

namespace kolorun {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `script` with its stdout in `out`; false and `error` when it could not
// run, failed or ran too long. Not through a shell: the path is the program.
bool run_script(const std::string& script, std::string& out, std::string& error) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    error = fmt::format("cannot make a pipe: {}", std::strerror(errno));
    return false;
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = fmt::format("cannot fork: {}", std::strerror(errno));
    ::close(fds[0]);
    ::close(fds[1]);
    return false;
  }
  if (pid == 0) {
    // kolorun blocks the job's signals (signals.h); the script starts with none blocked.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(fds[1], 1);
    char* argv[] = {const_cast<char*>(script.c_str()), nullptr};
    ::execv(script.c_str(), argv);  // with kolorun's environment
    std::fprintf(stderr, "kolorun: cannot run the host discovery script %s: %s\n", script.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  const auto deadline = Clock::now() + kScriptLimit;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (1 << 20)) {
      error = fmt::format("{} printed more than 1 MiB", script);
      timed_out = true;  // stop it the same way
      break;
    }
  }
  ::close(fds[0]);
  if (timed_out) ::kill(-pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    if (error.empty())
      error = fmt::format("{} did not finish within {} s", script,
                          std::chrono::duration_cast<std::chrono::seconds>(kScriptLimit).count());
    return false;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
  error = WIFEXITED(st) ? fmt::format("{} exited with code {}", script, WEXITSTATUS(st))
                        : fmt::format("{} was killed by {}", script, signal_name(WTERMSIG(st)));
  return false;
}

}  // namespace

Discovered discover_hosts(const std::string& script, int slots_per_host) {
  Discovered d;
  std::string out;
  if (!run_script(script, out, d.error)) {
    d.error = "host discovery script: " + d.error;
    return d;
  }
  std::istringstream in(out);
  try {
    for (const HostSlots& h : parse_host_lines(in, "host discovery script " + script + " output", slots_per_host)) {
      bool merged = false;
      for (auto& seen : d.hosts) {
        if (seen.name == h.name) {
          seen.slots += h.slots;
          merged = true;
        }
      }
      if (!merged) d.hosts.push_back(h);
    }
  } catch (const HostListError& e) {
    d.error = e.what();
    return d;
  }
  d.ok = true;
  return d;
}

}  // namespace kolorun
