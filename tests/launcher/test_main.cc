#include <gtest/gtest.h>
#include <sys/prctl.h>

int main(int argc, char** argv) {
  // Orphans of the jobs under test (ranks of a killed kolorun, grandchildren
  // of a killed rank) become our children, so the tests can reap them and
  // check that they are really gone; see launcher_test_util.h.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
