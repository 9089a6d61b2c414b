// kolorun: starts the N ranks of a kolo job on this host.
//
//   kolorun -np 4 ./train --epochs 3
//
// Order of events: parse and check everything the user typed (usage errors
// exit 2 before anything starts), block the job's signals, start the
// rendezvous store the ranks meet at, start the ranks, supervise them until
// the job ends. See supervisor.h for teardown and exit codes, spawn.h for what
// each rank process is promised, rank_env.h for what it is told.
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include "options.h"
#include "rank_env.h"
#include "rendezvous/auth.h"
#include "rendezvous/store.h"
#include "shm_sweep.h"
#include "signals.h"
#include "spawn.h"
#include "supervisor.h"

namespace {

using namespace kolorun;

void say(const std::string& text) { std::fprintf(stderr, "kolorun: %s\n", text.c_str()); }

// With fd 0, 1 or 2 closed, the next pipe would take its number and a rank's
// dup2 onto it would clobber the wrong end; occupy them with /dev/null.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

// --output-dir: rank r's stdout and stderr go straight to DIR/rank.<r>.stdout
// and .stderr, with no relay in between; `files` gets 2*np descriptors.
// Returns false (after saying why) when DIR or a file cannot be created.
bool open_output_files(const Options& o, std::vector<int>& files) {
  namespace fs = std::filesystem;
  const fs::path dir = *o.output_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    say(fmt::format("cannot create output directory '{}': {}", dir.string(), ec.message()));
    return false;
  }
  for (int r = 0; r < o.np; ++r) {
    for (const char* stream : {"stdout", "stderr"}) {
      const fs::path file = dir / fmt::format("rank.{}.{}", r, stream);
      int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        say(fmt::format("cannot create '{}': {}", file.string(), std::strerror(errno)));
        return false;
      }
      files.push_back(fd);
    }
  }
  return true;
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
  if (o.output_dir && !open_output_files(o, files)) return 2;

  block_job_signals();  // before the store's thread exists, see signals.h
  const int signal_fd = open_signal_fd();

  std::unique_ptr<kolo::rdv::StoreServer> store;
  JobIdentity job;
  try {
    // Port 0: the kernel picks a free port, so concurrent jobs never collide.
    job.job_id = random_hex(8);
    job.secret = random_hex(16);
    // Only the job's ranks, which know the secret, get past the store's handshake.
    store = std::make_unique<kolo::rdv::StoreServer>("127.0.0.1", 0,
                                                     kolo::auth::Key::from_secret(job.secret));
    job.store_addr = fmt::format("127.0.0.1:{}", store->port());
  } catch (const std::exception& e) {
    say(fmt::format("cannot start the rendezvous store: {}", e.what()));
    return 1;
  }

  const SupervisorOptions sup{o.tag_output, o.timeout_s, o.grace_s};
  std::vector<RankProcess> ranks;
  for (int r = 0; r < o.np; ++r) {
    RankSpec spec;
    spec.rank = r;
    spec.path = exe;
    spec.argv = o.command;
    spec.env = rank_environment(r, o.np, job);
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
  ParseResult parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  try {
    return run(*parsed.options);
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}
