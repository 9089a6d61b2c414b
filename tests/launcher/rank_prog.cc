// kolo_test_rank: a stand-in for a training program, for the launcher tests.
// It knows nothing of kolo; it reads KOLO_RANK and does what argv says:
//
//   lines K           K lines "out R i" on stdout and "err R i" on stderr
//   partial           "partial out R" / "partial err R", no trailing newline
//   progress          "step 1\rstep 2\rdone\n" (a progress bar)
//   longline N        one line of N 'x' characters
//   env               KOLO_* and torchrun's variables as NAME=value lines, and
//                     facts about its process: stdin, process group
//   args A...         "arg: A" per argument
//   exit C R          rank R exits with code C, the others with 0
//   sleep DIR [--grandchild] [--ignore-term] [--fail-rank R (--exit C | --signal S)]
//                     writes DIR/rank.R.pid (and, with --grandchild, forks a
//                     child that writes DIR/grandchild.R.pid), then sleeps
//                     forever; the failing rank first waits until all other
//                     ranks have written their pid files, so that the test
//                     knows every pid it must see gone.
//   barrier DIR N     prints env like `env`, creates DIR/<job>.<rank>, and
//                     exits once DIR holds N such files (jobs that overlap).
//   where [VAR...]    one line "rank=R local=L/S host=HOSTNAME cwd=DIR" and
//                     "VAR=value" (or "VAR unset") per VAR: where a rank ran
//                     and what it was given (multi-host tests).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = 0;
int g_size = 1;

const char* env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : def;
}

// Written under a temporary name and renamed, so a reader never sees half a pid.
void write_pid_file(const std::string& path, pid_t pid) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << pid << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int count_files(const std::string& dir, const std::string& suffix_not) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name.find(suffix_not) != std::string::npos) continue;
      ++n;
    }
    ::closedir(d);
  }
  return n;
}

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

void print_env() {
  for (const char* name : {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                           "KOLO_STORE_ADDR", "KOLO_JOB_ID", "KOLO_SECRET",
                           // torchrun's (tools/kolorun/torchrun_env.h)
                           "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                           "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                           "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                           "TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT"}) {
    std::printf("%s=%s\n", name, env_or(name, "<unset>"));
  }
  struct stat in, null;
  const bool devnull = ::fstat(0, &in) == 0 && ::stat("/dev/null", &null) == 0 &&
                       S_ISCHR(in.st_mode) && in.st_rdev == null.st_rdev;
  std::printf("stdin=%s\n", devnull ? "/dev/null" : "other");
  std::printf("pgid_is_pid=%d\n", ::getpgrp() == ::getpid() ? 1 : 0);
  std::fflush(stdout);
}

int mode_sleep(int argc, char** argv) {
  if (argc < 3) return 64;
  const std::string dir = argv[2];
  bool grandchild = false, ignore_term = false;
  int fail_rank = -1, exit_code = -1, sig = -1;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--grandchild") grandchild = true;
    else if (a == "--ignore-term") ignore_term = true;
    else if (a == "--fail-rank" && i + 1 < argc) fail_rank = std::atoi(argv[++i]);
    else if (a == "--exit" && i + 1 < argc) exit_code = std::atoi(argv[++i]);
    else if (a == "--signal" && i + 1 < argc) sig = std::atoi(argv[++i]);
    else return 64;
  }
  if (ignore_term) ::signal(SIGTERM, SIG_IGN);  // inherited by the grandchild too
  if (grandchild) {
    pid_t pid = ::fork();
    if (pid == 0) {
      write_pid_file(dir + "/grandchild." + std::to_string(g_rank) + ".pid", ::getpid());
      sleep_forever();
    }
    // The grandchild's pid file comes before the rank's, so a test that sees
    // all rank pid files also sees all grandchild pid files.
    while (!exists(dir + "/grandchild." + std::to_string(g_rank) + ".pid")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  write_pid_file(dir + "/rank." + std::to_string(g_rank) + ".pid", ::getpid());
  if (g_rank != fail_rank) sleep_forever();

  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < g_size; ++r) {
    while (!exists(dir + "/rank." + std::to_string(r) + ".pid") &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::fprintf(stderr, "rank %d failing now\n", g_rank);
  if (sig > 0) {
    ::signal(sig, SIG_DFL);
    ::kill(::getpid(), sig);
    sleep_forever();
  }
  return exit_code;
}

int mode_barrier(int argc, char** argv) {
  if (argc < 4) return 64;
  const std::string dir = argv[2];
  const int total = std::atoi(argv[3]);
  print_env();
  write_pid_file(dir + "/" + env_or("KOLO_JOB_ID", "nojob") + "." + std::to_string(g_rank), ::getpid());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (count_files(dir, ".tmp") < total) {
    if (std::chrono::steady_clock::now() > give_up) return 65;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  g_rank = std::atoi(env_or("KOLO_RANK", "0"));
  g_size = std::atoi(env_or("KOLO_SIZE", "1"));
  const std::string mode = argc > 1 ? argv[1] : "";

  if (mode == "lines" && argc > 2) {
    const int k = std::atoi(argv[2]);
    for (int i = 0; i < k; ++i) {
      std::printf("out %d %d\n", g_rank, i);
      std::fflush(stdout);
      std::fprintf(stderr, "err %d %d\n", g_rank, i);
    }
    return 0;
  }
  if (mode == "partial") {
    std::printf("partial out %d", g_rank);
    std::fflush(stdout);
    std::fprintf(stderr, "partial err %d", g_rank);
    return 0;
  }
  if (mode == "progress") {
    for (const char* s : {"step 1\r", "step 2\r", "done\n"}) {
      std::fputs(s, stdout);
      std::fflush(stdout);  // one write each, as a progress bar does
    }
    return 0;
  }
  if (mode == "longline" && argc > 2) {
    std::string line(std::strtoul(argv[2], nullptr, 10), 'x');
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
    return 0;
  }
  if (mode == "env") {
    print_env();
    return 0;
  }
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) std::printf("arg: %s\n", argv[i]);
    return 0;
  }
  if (mode == "exit" && argc > 3) {
    return g_rank == std::atoi(argv[3]) ? std::atoi(argv[2]) : 0;
  }
  if (mode == "where") {
    char host[256] = {}, cwd[4096] = {};
    ::gethostname(host, sizeof host - 1);
    if (::getcwd(cwd, sizeof cwd) == nullptr) std::strcpy(cwd, "?");
    std::printf("rank=%d local=%s/%s host=%s cwd=%s\n", g_rank, env_or("KOLO_LOCAL_RANK", "?"),
                env_or("KOLO_LOCAL_SIZE", "?"), host, cwd);
    for (int i = 2; i < argc; ++i) {
      const char* v = std::getenv(argv[i]);
      if (v != nullptr) std::printf("%s=%s\n", argv[i], v);
      else std::printf("%s unset\n", argv[i]);
    }
    return 0;
  }
  if (mode == "sleep") return mode_sleep(argc, argv);
  if (mode == "barrier") return mode_barrier(argc, argv);
  std::fprintf(stderr, "kolo_test_rank: unknown mode '%s'\n", mode.c_str());
  return 64;
}
