#include "signals.h"

#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>

#include <cerrno>
#include <system_error>

namespace kolorun {

namespace {

sigset_t g_job_signals;

// SIGHUP is left alone when it arrives ignored: that is `nohup kolorun ...`,
// and the ranks inherit the ignoring. SIGINT is handled even when it arrives
// ignored (a background job of a script): kolorun's Ctrl-C contract is to
// stop the job, and a blocked signal reaches the signalfd either way.
sigset_t job_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&set, s);
  struct sigaction hup;
  if (::sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void block_job_signals() {
  g_job_signals = job_signals();
  const sigset_t set = g_job_signals;
  if (int rc = pthread_sigmask(SIG_BLOCK, &set, nullptr); rc != 0)
    throw std::system_error(rc, std::generic_category(), "pthread_sigmask");
  // A reader of kolorun's output that goes away (`kolorun ... | head`) must
  // not kill kolorun before it has stopped the ranks; writes fail with EPIPE.
  ::signal(SIGPIPE, SIG_IGN);
}

int open_signal_fd() {
  const sigset_t set = g_job_signals;
  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  return fd;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return "signal " + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

}  // namespace kolorun
