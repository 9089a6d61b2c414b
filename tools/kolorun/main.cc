// kolorun: starts the N ranks of a kolo job on this host, or on several
// hosts (launch_hosts.h), or is one host's agent of such a job (agent.h).
//
//   kolorun -np 4 ./train --epochs 3
//   kolorun -H a:4,b:4 ./train --epochs 3
//
// Order of events: parse and check everything the user typed (usage errors
// exit 2 before anything starts), block the job's signals, start the
// rendezvous store the ranks meet at, start the ranks, supervise them until
// the job ends. See supervisor.h for teardown and exit codes, spawn.h for what
// each rank process is promised, rank_env.h and torchrun_env.h for what it
// is told.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "agent.h"
#include "elastic_job.h"
#include "launch_hosts.h"
#include "options.h"
#include "output_files.h"
#include "rank_env.h"
#include "say.h"
#include "job_store.h"
#include "shm_sweep.h"
#include "signals.h"
#include "spawn.h"
#include "supervisor.h"
#include "torchrun_env.h"

namespace {

using namespace kolorun;

// With fd 0, 1 or 2 closed, the next pipe would take its number and a rank's
// dup2 onto it would clobber the wrong end; occupy them with /dev/null.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

int run(const Options& o) {
  std::string exe;
  try {
    exe = resolve_executable(o.command.front());
  } catch (const ExecError& e) {
    say(e.what());
    return 2;
  }
  std::vector<int> files;
  if (o.output_dir && !open_output_files(*o.output_dir, o.np, files)) return 2;

  block_job_signals();  // before the store's thread exists, see signals.h
  const int signal_fd = open_signal_fd();

  std::unique_ptr<kolo::rdv::StoreServer> store;
  JobIdentity job;
  try {
    store = start_job_store("127.0.0.1", "127.0.0.1", job);
  } catch (const std::exception& e) {
    say(fmt::format("cannot start the rendezvous store: {}", e.what()));
    return 1;
  }

  std::vector<std::string> master;  // torchrun's MASTER_ADDR/MASTER_PORT: rank 0 is on this host
  try {
    master = master_variables("127.0.0.1", free_master_port());
  } catch (const std::exception& e) {
    say(fmt::format("cannot choose MASTER_PORT for the job: {}", e.what()));
    ::close(signal_fd);
    return 1;
  }

  const SupervisorOptions sup{o.tag_output, o.timeout_s, o.grace_s};
  std::vector<RankProcess> ranks;
  for (int r = 0; r < o.np; ++r) {
    RankSpec spec;
    spec.rank = r;
    spec.path = exe;
    spec.argv = o.command;
    std::vector<std::string> vars = o.env;  // -x first: kolorun's own variables win
    const auto kolo = kolo_variables(r, o.np, r, o.np, job, "");
    vars.insert(vars.end(), kolo.begin(), kolo.end());
    const auto torchrun = torchrun_variables({r, o.np, r, o.np, 0, 1}, job.job_id);
    vars.insert(vars.end(), torchrun.begin(), torchrun.end());
    vars.insert(vars.end(), master.begin(), master.end());
    spec.env = environment_with(vars);
    if (!files.empty()) {
      spec.stdout_file = files[2 * r];
      spec.stderr_file = files[2 * r + 1];
    }
    int fail_code = 0;
    try {
      ranks.push_back(spawn_rank(spec));
    } catch (const ExecError& e) {
      say(e.what());
      fail_code = 2;
    } catch (const std::exception& e) {
      say(fmt::format("cannot start rank {}: {}", r, e.what()));
      fail_code = 1;
    }
    if (fail_code != 0) {
      for (int fd : files) ::close(fd);
      if (ranks.empty()) {
        ::close(signal_fd);
        return fail_code;
      }
      say(fmt::format("stopping the {} rank{} already started", ranks.size(), ranks.size() == 1 ? "" : "s"));
      return abort_started(std::move(ranks), signal_fd, sup, fail_code);
    }
  }
  for (int fd : files) ::close(fd);  // the ranks hold their own copies now
  const int code = supervise(std::move(ranks), signal_fd, sup);
  if (int n = sweep_shm(job.job_id); n > 0)
    say(fmt::format("removed {} shared-memory segment{} the ranks left behind", n, n == 1 ? "" : "s"));
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_std_fds();
  if (argc == 2 && std::strcmp(argv[1], kolorun::kAgentFlag) == 0) {
    try {
      return kolorun::agent_main();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kolorun (agent): %s\n", e.what());
      return 1;
    }
  }
  ParseResult parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  try {
    if (parsed.options->elastic) return run_elastic(*parsed.options);
    if (!parsed.options->hosts.empty()) return run_hosts(*parsed.options);
    return run(*parsed.options);
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}
