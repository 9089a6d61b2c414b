// Usage errors: a clear message and exit code 2, before any rank starts.
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {

struct BadInput {
  const char* name;
  std::vector<std::string> args;
  std::string message;  // a line of kolorun's stderr starts with this
};

void PrintTo(const BadInput& b, std::ostream* os) { *os << b.name; }

class Usage : public testing::TestWithParam<BadInput> {};

TEST_P(Usage, ExitsTwoWithAClearMessage) {
  const BadInput& b = GetParam();
  Outcome o = run_kolorun(b.args);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err.rfind(b.message, 0), 0u) << "stderr: " << o.err;
}

INSTANTIATE_TEST_SUITE_P(
    Launcher, Usage,
    testing::Values(
        BadInput{"np_zero", {"-np", "0", "true"}, "kolorun: -np must be at least 1, got 0\n"},
        BadInput{"np_negative", {"-np", "-3", "true"}, "kolorun: -np must be at least 1, got -3\n"},
        BadInput{"np_missing", {"true"}, "kolorun: -np N is required"},
        BadInput{"np_not_a_number", {"-np", "four", "true"}, "kolorun: Could not convert: --np = four"},
        BadInput{"no_command", {"-np", "2"}, "kolorun: no command given; usage: kolorun -np N"},
        BadInput{"no_command_after_dashes", {"-np", "2", "--"}, "kolorun: no command given; usage: "},
        BadInput{"unknown_flag", {"-np", "2", "--bogus", "true"},
                 "kolorun: The following argument was not expected: --bogus"},
        BadInput{"missing_program", {"-np", "2", "nosuchprog"},
                 "kolorun: cannot execute 'nosuchprog': No such file or directory\n"},
        BadInput{"missing_path", {"-np", "2", "/nonexistent/prog"},
                 "kolorun: cannot execute '/nonexistent/prog': No such file or directory\n"},
        BadInput{"directory", {"-np", "1", "/"}, "kolorun: cannot execute '/': Permission denied\n"},
        BadInput{"bad_timeout", {"-np", "1", "--timeout", "0", "true"}, "kolorun: --timeout must be positive"}),
    [](const testing::TestParamInfo<BadInput>& i) { return std::string(i.param.name); });

TEST(UsageFiles, NotExecutableFileIsRefused) {
  TempDir dir;
  const std::string path = dir.file("script");
  std::ofstream(path) << "#!/bin/sh\necho hi\n";
  ::chmod(path.c_str(), 0644);
  Outcome o = run_kolorun({"-np", "2", path});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "kolorun: cannot execute '" + path + "': Permission denied\n");
}

TEST(UsageFiles, ExecFailureInTheChildIsReported) {
  // Executable but not a program: only execve itself can tell, in the child,
  // which reports it to kolorun through its close-on-exec pipe.
  TempDir dir;
  const std::string path = dir.file("garbage");
  std::ofstream(path) << "this is not a program\n";
  ::chmod(path.c_str(), 0755);
  Outcome o = run_kolorun({"-np", "2", path});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "kolorun: cannot execute '" + path + "': Exec format error\n");
  EXPECT_EQ(o.out, "");
}

TEST(UsageFiles, OutputDirThatCannotBeCreated) {
  Outcome o = run_kolorun({"-np", "1", "--output-dir", "/proc/kolorun-test/out", "true"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err.rfind("kolorun: cannot create output directory '/proc/kolorun-test/out': ", 0), 0u) << o.err;
}

TEST(UsageHelp, HelpDocumentsEveryFlagAndVariable) {
  Outcome o = run_kolorun({"--help"});
  EXPECT_EQ(o.code, 0);
  for (const char* word : {"Usage: kolorun -np N", "--np", "--output-dir", "--tag-output", "--no-tag-output",
                           "--timeout", "--grace-period", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK",
                           "KOLO_LOCAL_SIZE", "KOLO_STORE_ADDR", "KOLO_JOB_ID", "KOLO_SECRET", "RANK, LOCAL_RANK, WORLD_SIZE",
                           "GROUP_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR, MASTER_PORT"}) {
    EXPECT_NE(o.out.find(word), std::string::npos) << "--help does not mention " << word;
  }
}

}  // namespace
}  // namespace kolotest
