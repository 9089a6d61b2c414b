// Helpers of the launcher tests: run kolorun as a real process, collect its
// output and exit code, find the processes it started and see them gone.
//
// The test process makes itself a child subreaper (test_main.cc): ranks and
// grandchildren orphaned by a dying kolorun or rank become its children, so
// it can reap them and "gone" means kill(pid, 0) fails with ESRCH, not a
// zombie left for an init that may never reap it.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace kolotest {

struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

struct Outcome {
  int code = -1;  // exit code, or 128+signal when kolorun died by a signal
  std::string out, err;
  double seconds = 0;
};

// One running kolorun; its stdout and stderr go to files, so a test never
// blocks on a full pipe. The destructor SIGKILLs it if it still runs.
class Kolorun {
 public:
  explicit Kolorun(const std::vector<std::string>& args);
  ~Kolorun();
  pid_t pid() const { return pid_; }
  // Waits for the exit; kills kolorun and records a test failure after timeout_s.
  Outcome wait(double timeout_s = 30);

 private:
  TempDir files_;
  pid_t pid_ = -1;
  double started_ = 0;
};

Outcome run_kolorun(const std::vector<std::string>& args, double timeout_s = 30);

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string rank_prog();
double now_seconds();

// Waits until DIR/<kind>.<r>.pid exists for r in [0, n) and returns the pids,
// in rank order; a test failure and an empty vector after timeout_s.
std::vector<pid_t> wait_for_pids(const std::string& dir, const std::string& kind, int n,
                                 double timeout_s = 30);

// Reaps whatever orphans were handed to this (subreaper) process, until pid
// no longer exists or timeout_s passes.
bool gone_within(pid_t pid, double timeout_s = 10);

// SIGKILLs and reaps each pid that still exists: cleanup after a failed test.
void kill_leftovers(const std::vector<pid_t>& pids);

std::vector<std::string> split_lines(const std::string& text);
std::string read_file(const std::string& path);

// The lines of `lines` that start with prefix, with the prefix removed.
std::vector<std::string> with_prefix(const std::vector<std::string>& lines, const std::string& prefix);

// "[r] NAME=value" lines of kolorun's output -> one map per rank tag.
using Vars = std::map<std::string, std::string>;
std::map<int, Vars> tagged_variables(const std::string& out);

}  // namespace kolotest
