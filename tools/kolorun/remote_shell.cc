#include "remote_shell.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <stdexcept>

#include "signals.h"
#include "core/config.h"
#include "spawn.h"

namespace kolorun {

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789_-+=./:@,%") == std::string::npos)
    return word;
  std::string q = "'";
  for (char c : word) {
    if (c == '\'') q += "'\\''";
    else q.push_back(c);
  }
  return q + "'";
}

std::vector<std::string> RemoteShell::argv(const std::string& host, const std::string& remote) const {
  std::vector<std::string> v = words;
  v.push_back(host);
  v.push_back(remote);
  return v;
}

RemoteShell make_remote_shell(const std::string& rsh, int port, const std::string& identity,
                              int alive_interval_s) {
  wordexp_t we{};
  // WRDE_NOCMD: a $(...) in --rsh is refused rather than run; quotes and
  // ~ work as in a shell.
  const int rc = ::wordexp(rsh.c_str(), &we, WRDE_NOCMD | WRDE_SHOWERR);
  if (rc != 0) {
    if (rc == WRDE_NOSPACE) ::wordfree(&we);
    throw std::runtime_error(fmt::format("--rsh/KOLO_RSH '{}' is not a command line kolorun can split into words", rsh));
  }
  RemoteShell r;
  for (std::size_t i = 0; i < we.we_wordc; ++i) r.words.emplace_back(we.we_wordv[i]);
  ::wordfree(&we);
  if (r.words.empty()) throw std::runtime_error("--rsh/KOLO_RSH is empty");
  const std::string& prog = r.words.front();
  const auto slash = prog.rfind('/');
  r.is_ssh = (slash == std::string::npos ? prog : prog.substr(slash + 1)) == "ssh";
  if (!r.is_ssh) {
    if (port != 0 || !identity.empty())
      throw std::runtime_error(fmt::format("-p and -i are options of ssh; '{}' is not ssh: give its own options in --rsh",
                                           prog));
    return r;
  }
  std::vector<std::string> ours = {
      "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
      "-o", fmt::format("ServerAliveInterval={}", alive_interval_s), "-o", "ServerAliveCountMax=3"};
  r.words.insert(r.words.begin() + 1, ours.begin(), ours.end());
  if (port != 0) {
    r.words.push_back("-p");
    r.words.push_back(std::to_string(port));
  }
  if (!identity.empty()) {
    r.words.push_back("-i");
    r.words.push_back(identity);
  }
  return r;
}

namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& w : v) s += (s.empty() ? "" : " ") + shell_quote(w);
  return s;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::vector<std::string> check_hosts(const RemoteShell& rsh, const std::vector<std::string>& hosts,
                                     double timeout_s) {
  struct Probe {
    std::string host;
    std::vector<std::string> argv;
    RankProcess proc;
    std::string output;
    bool done = false;
    int status = 0;
  };
  std::vector<Probe> probes;
  std::vector<std::string> errors;
  std::string exe;
  try {
    exe = resolve_executable(rsh.words.front());
  } catch (const ExecError& e) {
    return {fmt::format("cannot reach the other hosts: {}", e.what())};
  }
  for (const auto& h : hosts) {
    Probe p;
    p.host = h;
    p.argv = rsh.argv(h, "true");
    RankSpec spec;
    spec.path = exe;
    spec.argv = p.argv;

    spec.env = kolo::config::environment();
    p.proc = spawn_rank(spec);
    // One pipe for both: ssh's message may come on either stream.
    probes.push_back(std::move(p));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Probe*, int*>> owners;
    for (auto& p : probes) {
      for (int* fd : {&p.proc.stdout_pipe, &p.proc.stderr_pipe}) {
        if (*fd < 0) continue;
        fds.push_back({*fd, POLLIN, 0});
        owners.emplace_back(&p, fd);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1);
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        if (owners[i].first->output.size() < 8192) owners[i].first->output.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(*owners[i].second);
        *owners[i].second = -1;
      }
    }
  }
  for (auto& p : probes) {
    for (int* fd : {&p.proc.stdout_pipe, &p.proc.stderr_pipe}) {
      if (*fd >= 0) ::close(*fd);
    }
    // A probe closes its output just before it exits: wait for the exit too.
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(p.proc.pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
      ::usleep(10 * 1000);
    }
    if (r == 0) {
      // Still running after the deadline: neither success nor an answer.
      ::kill(-p.proc.pid, SIGKILL);
      ::waitpid(p.proc.pid, &status, 0);
      errors.push_back(fmt::format("cannot reach host '{}': `{}` did not finish within {:g} s", p.host,
                                   joined(p.argv), timeout_s));
      continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    const std::string how = WIFEXITED(status) ? fmt::format("exited with code {}", WEXITSTATUS(status))
                                              : fmt::format("was killed by {}", signal_name(WTERMSIG(status)));
    const std::string said = trimmed(p.output);
    errors.push_back(fmt::format("cannot reach host '{}': `{}` {}{}{}", p.host, joined(p.argv), how,
                                 said.empty() ? "" : ": ", said));
  }
  return errors;
}

}  // namespace kolorun
