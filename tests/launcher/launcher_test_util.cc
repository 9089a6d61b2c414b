#include "launcher_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace kolotest {

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string rank_prog() { return KOLO_TEST_RANK_PATH; }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/kolorun-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

Kolorun::Kolorun(const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{KOLORUN_PATH};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, files_.file("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, files_.file("err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  started_ = now_seconds();
  int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    pid_ = -1;
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
  }
}

Kolorun::~Kolorun() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

Outcome Kolorun::wait(double timeout_s) {
  Outcome o;
  if (pid_ <= 0) return o;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (now_seconds() - started_ > timeout_s) {
      ADD_FAILURE() << "kolorun still running after " << timeout_s << " s; killing it";
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    sleep_ms(5);
  }
  pid_ = -1;
  o.seconds = now_seconds() - started_;
  o.code = decode(status);
  o.out = read_file(files_.file("out"));
  o.err = read_file(files_.file("err"));
  return o;
}

Outcome run_kolorun(const std::vector<std::string>& args, double timeout_s) {
  Kolorun k(args);
  return k.wait(timeout_s);
}

std::vector<pid_t> wait_for_pids(const std::string& dir, const std::string& kind, int n,
                                 double timeout_s) {
  const double deadline = now_seconds() + timeout_s;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const std::string path = dir + "/" + kind + "." + std::to_string(r) + ".pid";
    while (!std::filesystem::exists(path)) {
      if (now_seconds() > deadline) {
        ADD_FAILURE() << "no " << path << " after " << timeout_s << " s";
        return {};
      }
      sleep_ms(5);
    }
    pids.push_back(static_cast<pid_t>(std::stol(read_file(path))));
  }
  return pids;
}

bool gone_within(pid_t pid, double timeout_s) {
  const double deadline = now_seconds() + timeout_s;
  for (;;) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    if (now_seconds() > deadline) return false;
    sleep_ms(5);
  }
}

void kill_leftovers(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0 && ::kill(p, 0) == 0) {
      ::kill(p, SIGKILL);
      gone_within(p, 5);
    }
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> with_prefix(const std::vector<std::string>& lines, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& l : lines) {
    if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
  }
  return out;
}

std::map<int, Vars> tagged_variables(const std::string& out) {
  std::map<int, Vars> by_rank;
  static const std::regex line_re(R"(\[(\d+)\] ([A-Za-z_]+)=(.*))");
  for (const auto& line : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

}  // namespace kolotest
