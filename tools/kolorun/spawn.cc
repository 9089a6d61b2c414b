#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "core/config.h"

namespace kolorun {

namespace {

std::string exec_error_text(const std::string& cmd, int err) {
  return "cannot execute '" + cmd + "': " + std::strerror(err);
}

// 0 when `path` is an executable regular file, an errno value otherwise.
int check_executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EACCES;  // what execve says for a directory
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec. kolorun has threads (the store
// server), so only async-signal-safe calls are allowed here: no allocation,
// no locks, no stdio. Never returns.
[[noreturn]] void exec_child(pid_t parent, const char* path, char* const* argv, char* const* envp,
                             int in_fd, int out_fd, int err_fd, int report_fd, int death_signal) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, death_signal);
  // kolorun may have died between fork and prctl; then no signal will ever
  // come and this rank would run on as an orphan.
  if (::getppid() != parent) ::_exit(127);

  // kolorun blocks the signals it reads through a signalfd and ignores
  // SIGPIPE; both would survive exec and change how the rank behaves. SIGINT
  // and SIGTERM may have reached kolorun ignored (a background job of a
  // script) and must not stay so: they are how kolorun stops the rank.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM}) ::signal(sig, SIG_DFL);

  int devnull = in_fd >= 0 ? in_fd : ::open("/dev/null", O_RDONLY);
  int err = 0;
  if (devnull < 0 || ::dup2(devnull, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) {
    err = errno;
  } else {
    // Whatever else kolorun holds (the store's listening socket, other ranks'
    // pipes) must not leak into the rank, whoever opened it without CLOEXEC.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(path, argv, envp);
    err = errno;
  }
  ssize_t ignored = ::write(report_fd, &err, sizeof err);
  (void)ignored;
  ::_exit(127);
}

}  // namespace

std::string resolve_executable(const std::string& cmd) {
  if (cmd.empty()) throw ExecError(exec_error_text(cmd, ENOENT));
  if (cmd.find('/') != std::string::npos) {
    if (int err = check_executable(cmd)) throw ExecError(exec_error_text(cmd, err));
    return cmd;
  }
  const std::string path_list = kolo::config::env_var("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  // As execvp: a match that is not executable is remembered (EACCES) but the
  // search goes on; ENOENT only when nothing of that name exists anywhere.
  int first_err = ENOENT;
  std::size_t start = 0;
  while (start <= path_list.size()) {
    std::size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    std::string dir = path_list.substr(start, end - start);
    if (dir.empty()) dir = ".";  // an empty PATH entry means the current directory
    std::string candidate = dir + "/" + cmd;
    int err = check_executable(candidate);
    if (err == 0) return candidate;
    if (err != ENOENT && err != ENOTDIR && first_err == ENOENT) first_err = err;
    start = end + 1;
  }
  throw ExecError(exec_error_text(cmd, first_err));
}

RankProcess spawn_rank(const RankSpec& spec) {
  RankProcess rp;
  rp.rank = spec.rank;
  int out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1}, in[2] = {-1, -1};
  try {
    if (spec.stdin_pipe) make_pipe(in);
    if (spec.stdout_file < 0) make_pipe(out);
    if (spec.stderr_file < 0) make_pipe(err);
    make_pipe(report);
  } catch (...) {
    for (int* fd : {&out[0], &out[1], &err[0], &err[1], &report[0], &report[1], &in[0], &in[1]}) close_fd(*fd);
    throw;
  }
  const int child_out = spec.stdout_file >= 0 ? spec.stdout_file : out[1];
  const int child_err = spec.stderr_file >= 0 ? spec.stderr_file : err[1];

  // Everything the child needs is built before fork (see exec_child).
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid == 0)
    exec_child(parent, spec.path.c_str(), argv.data(), envp.data(), in[0], child_out, child_err, report[1],
               spec.death_signal);
  const int fork_errno = errno;
  close_fd(in[0]);
  close_fd(out[1]);
  close_fd(err[1]);
  close_fd(report[1]);
  if (pid < 0) {
    for (int* fd : {&out[0], &err[0], &report[0], &in[1]}) close_fd(*fd);
    throw std::system_error(fork_errno, std::generic_category(), "fork");
  }
  // Also set here: kolorun may signal the group before the child has run
  // setpgid itself. EACCES once the child has exec'd is fine.
  ::setpgid(pid, pid);

  // Blocks until the child has exec'd (the pipe closes, 0 bytes) or failed.
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close_fd(report[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close_fd(out[0]);
    close_fd(err[0]);
    close_fd(in[1]);
    throw ExecError(exec_error_text(spec.argv.at(0), child_errno));
  }

  for (int fd : {out[0], err[0]}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  rp.pid = pid;
  rp.stdout_pipe = out[0];
  rp.stderr_pipe = err[0];
  rp.stdin_pipe = in[1];
  return rp;
}

}  // namespace kolorun
