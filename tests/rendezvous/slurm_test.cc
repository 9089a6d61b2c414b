// Slurm's host list and tasks-per-node notations.
#include <gtest/gtest.h>

#include "rendezvous/discovery.h"
#include "rendezvous/slurm.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

TEST(FirstSlurmHost, ExpandsTheFirstHost) {
  EXPECT_EQ(first_slurm_host("localhost"), "localhost");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("node[03-05,7],gpu1"), "node03");  // zero padding kept
  EXPECT_EQ(first_slurm_host("node[7,03-05]"), "node7");
  EXPECT_EQ(first_slurm_host("n[1-2]-ib"), "n1-ib");
  EXPECT_EQ(first_slurm_host("rack[2-3]-node[010-020]"), "rack2-node010");
  EXPECT_EQ(first_slurm_host("gpu1,node[03-05]"), "gpu1");
  EXPECT_EQ(first_slurm_host("node-1.cluster.org"), "node-1.cluster.org");
}

TEST(FirstSlurmHost, MalformedListsAreErrors) {
  for (const char* bad : {"", ",a", "node[1-2", "node1-2]", "node[]", "node[a-b]"}) {
    SCOPED_TRACE(bad);
    const std::string e = test::error_of([&] { first_slurm_host(bad); });
    EXPECT_NE(e.find(std::string("Slurm node list '") + bad + "'"), std::string::npos) << e;
  }
}

TEST(SlurmTasksOnNode, CountsRunsOfNodes) {
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("1,3(x2),2", 2), 3);
  EXPECT_EQ(slurm_tasks_on_node("1,3(x2),2", 3), 2);
}

TEST(SlurmTasksOnNode, UnknownNodeNeedsAUniformCount) {
  EXPECT_EQ(slurm_tasks_on_node("8(x16)", -1), 8);
  EXPECT_EQ(slurm_tasks_on_node("2,2(x3)", -1), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", -1), -1);
}

TEST(SlurmTasksOnNode, MalformedValuesAreErrors) {
  for (const char* bad : {"", "x", "2(x3", "2(3)", "2(x)", "2,,1", "-1"}) {
    SCOPED_TRACE(bad);
    const std::string e = test::error_of([&] { slurm_tasks_on_node(bad, 0); });
    EXPECT_NE(e.find(std::string("SLURM_TASKS_PER_NODE=") + bad + " is malformed"), std::string::npos) << e;
  }
  const std::string e = test::error_of([&] { slurm_tasks_on_node("2(x3),1", 4); });
  EXPECT_NE(e.find("SLURM_NODEID=4 is past the 4 nodes of SLURM_TASKS_PER_NODE=2(x3),1"), std::string::npos) << e;
}

}  // namespace
}  // namespace kolo::rdv
