// discover(): each launcher's variables, their precedence, and every error.
#include <gtest/gtest.h>

#include "rendezvous/discovery.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

using test::error_of;

// Expects the error text to contain `part`.
void expect_error(const Env& env, const std::string& part) {
  const std::string e = error_of([&] { discover(env); });
  EXPECT_NE(e.find(part), std::string::npos) << "error: " << e << "\nexpected: " << part;
}

void expect_ranks(const Discovery& d, const char* source, int rank, int size, int local_rank,
                  int local_size) {
  EXPECT_EQ(d.source, source);
  EXPECT_EQ(d.rank, rank);
  EXPECT_EQ(d.size, size);
  EXPECT_EQ(d.local_rank, local_rank);
  EXPECT_EQ(d.local_size, local_size);
}

void expect_store(const Discovery& d, const std::string& host, int port, bool rank0_hosts) {
  EXPECT_EQ(d.store_host, host);
  EXPECT_EQ(d.store_port, port);
  EXPECT_EQ(d.rank0_hosts_store, rank0_hosts);
}

TEST(Discover, NothingSetIsASingleProcess) {
  Discovery d = discover({{"PATH", "/bin"}, {"HOME", "/root"}});
  expect_ranks(d, "single", 0, 1, 0, 1);
  expect_store(d, "", 0, true);
  EXPECT_EQ(d.job_id, "");
}

TEST(Discover, Kolorun) {
  Discovery d = discover({{"KOLO_RANK", "3"}, {"KOLO_SIZE", "8"}, {"KOLO_LOCAL_RANK", "1"},
                          {"KOLO_LOCAL_SIZE", "2"}, {"KOLO_STORE_ADDR", "10.0.0.5:29400"},
                          {"KOLO_JOB_ID", "job-42"}});
  expect_ranks(d, "kolo", 3, 8, 1, 2);
  expect_store(d, "10.0.0.5", 29400, false);  // kolorun hosts the store
  EXPECT_EQ(d.job_id, "job-42");
}

TEST(Discover, KolorunRankIgnoresTheTorchrunVariablesKolorunSetsToo) {
  // kolorun gives every rank torchrun's variables as well (for programs
  // written for torchrun); kolo keeps to kolorun's store and job id, not
  // MASTER_PORT+1 as under a real torchrun.
  Discovery d = discover({{"KOLO_RANK", "3"}, {"KOLO_SIZE", "4"}, {"KOLO_LOCAL_RANK", "1"},
                          {"KOLO_LOCAL_SIZE", "2"}, {"KOLO_STORE_ADDR", "10.0.0.5:29400"},
                          {"KOLO_JOB_ID", "job-42"}, {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                          {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.5"},
                          {"MASTER_PORT", "29517"}, {"TORCHELASTIC_RUN_ID", "job-42"},
                          {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  expect_ranks(d, "kolo", 3, 4, 1, 2);
  expect_store(d, "10.0.0.5", 29400, false);
  EXPECT_EQ(d.job_id, "job-42");
}

TEST(Discover, KoloWithoutStoreAddressFallsBackToRankZeroHosting) {
  Discovery d = discover({{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"}});
  expect_ranks(d, "kolo", 0, 2, -1, -1);
  expect_store(d, "", 0, true);
}

TEST(Discover, TorchrunStyleVariables) {
  Discovery d = discover({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                          {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}});
  expect_ranks(d, "torchrun", 5, 8, 1, 4);
  expect_store(d, "node7", 29500, true);
  EXPECT_EQ(d.job_id, "");
}

TEST(Discover, RealTorchrunLeavesMasterPortToItsOwnStore) {
  Discovery d = discover({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                          {"TORCHELASTIC_RUN_ID", "abc"}});
  expect_store(d, "127.0.0.1", 29501, true);
  EXPECT_EQ(d.job_id, "abc");
}

TEST(Discover, TorchrunWithoutMasterUsesTheFileRendezvous) {
  Discovery d = discover({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  expect_ranks(d, "torchrun", 1, 2, -1, -1);
  expect_store(d, "", 0, true);
}

TEST(Discover, OpenMpi) {
  Discovery d = discover({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                          {"OMPI_MCA_ess_base_jobid", "3735945217"}, {"PMIX_NAMESPACE", "prterun-x-1@1"}});
  expect_ranks(d, "openmpi", 2, 4, 2, 4);
  expect_store(d, "", 0, true);
  EXPECT_EQ(d.job_id, "3735945217");
}

TEST(Discover, OpenMpiJobIdFromPmixNamespace) {
  Discovery d = discover({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"},
                          {"PMIX_NAMESPACE", "prterun-x-1@1"}});
  EXPECT_EQ(d.job_id, "prterun-x-1@1");
}

TEST(Discover, MpichHydra) {
  Discovery d = discover({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "1"},
                          {"MPI_LOCALNRANKS", "3"}, {"PMI_KVSNAME", "kvs_123_0"}});
  expect_ranks(d, "mpich", 1, 3, 1, 3);
  expect_store(d, "", 0, true);
  EXPECT_EQ(d.job_id, "kvs_123_0");
  EXPECT_EQ(discover({{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}, {"PMI_JOBID", "j"}, {"PMI_KVSNAME", "k"}}).job_id,
            "j");
}

Env slurm_env() {
  return {{"SLURM_PROCID", "5"},           {"SLURM_NTASKS", "7"},
          {"SLURM_LOCALID", "1"},          {"SLURM_NODEID", "2"},
          {"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_STEP_NODELIST", "node[03-05,7]"},
          {"SLURM_JOB_NODELIST", "other[1-9]"}, {"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"}};
}

TEST(Discover, Slurm) {
  Discovery d = discover(slurm_env());
  expect_ranks(d, "slurm", 5, 7, 1, 2);
  EXPECT_EQ(d.store_host, "node03");
  EXPECT_GE(d.store_port, 20000);
  EXPECT_LT(d.store_port, 32768);  // below Linux's default ephemeral ports
  EXPECT_TRUE(d.rank0_hosts_store);
  EXPECT_EQ(d.job_id, "slurm-1234.0");
}

TEST(Discover, SlurmPortIsTheSameForEveryRankAndDiffersBetweenSteps) {
  Env other_rank = slurm_env();
  other_rank["SLURM_PROCID"] = "0";
  other_rank["SLURM_LOCALID"] = "0";
  other_rank["SLURM_NODEID"] = "0";
  EXPECT_EQ(discover(other_rank).store_port, discover(slurm_env()).store_port);
  Env next_step = slurm_env();
  next_step["SLURM_STEP_ID"] = "1";
  EXPECT_NE(discover(next_step).store_port, discover(slurm_env()).store_port);
  EXPECT_EQ(discover(next_step).job_id, "slurm-1234.1");
}

// Every job's port is below Linux's ephemeral range (32768 up), where an
// outgoing connection on rank 0's node may hold it.
TEST(Discover, SlurmPortIsBelowTheEphemeralRange) {
  for (int job = 1; job <= 300; ++job) {
    Env e = slurm_env();
    e["SLURM_JOB_ID"] = std::to_string(job);
    const int port = discover(e).store_port;
    ASSERT_GE(port, 20000) << "job " << job;
    ASSERT_LT(port, 32768) << "job " << job;
  }
}

TEST(Discover, SlurmLocalSizeSources) {
  Env e = slurm_env();
  e["SLURM_NODEID"] = "3";
  e["SLURM_LOCALID"] = "0";
  EXPECT_EQ(discover(e).local_size, 1);  // the node after the three 2-task nodes
  e["SLURM_NTASKS_PER_NODE"] = "4";      // --ntasks-per-node wins
  EXPECT_EQ(discover(e).local_size, 4);
  Env uneven_no_node = slurm_env();
  uneven_no_node.erase("SLURM_NODEID");
  EXPECT_EQ(discover(uneven_no_node).local_size, -1);  // unknown, not guessed
  EXPECT_EQ(discover(uneven_no_node).local_rank, 1);
  Env even_no_node = uneven_no_node;
  even_no_node["SLURM_TASKS_PER_NODE"] = "2(x4)";
  EXPECT_EQ(discover(even_no_node).local_size, 2);
}

TEST(Discover, SlurmFallsBackToTheJobNodeList) {
  Env e = slurm_env();
  e.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(discover(e).store_host, "other1");
}

TEST(Discover, SlurmWithoutJobIdUsesTheFileRendezvous) {
  Discovery d = discover({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "a,b"}});
  expect_ranks(d, "slurm", 0, 2, -1, -1);
  expect_store(d, "", 0, true);
}

TEST(Discover, PrecedenceKoloTorchrunOpenMpiMpichSlurm) {
  Env e = slurm_env();
  e.insert({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  EXPECT_EQ(discover(e).source, "mpich");
  e.insert({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(discover(e).source, "openmpi");
  e.insert({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(discover(e).source, "torchrun");
  e.insert({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}});
  EXPECT_EQ(discover(e).source, "kolo");
}

TEST(Discover, ElasticWorkerIgnoresTheVariablesOfAnOuterLauncher) {
  // kolorun --min-np inside a Slurm job: the worker inherits the batch step's
  // (or its srun's) variables, but its rank comes from kolorun's store.
  Env e = slurm_env();
  e.insert({{"KOLO_WORKER_ID", "3"}, {"KOLO_STORE_ADDR", "h0:31000"}, {"KOLO_JOB_ID", "el-1"}});
  Discovery d = discover(e);
  EXPECT_EQ(d.source, "kolo");
  EXPECT_EQ(d.worker_id, "3");
  EXPECT_EQ(d.job_id, "el-1");
  expect_store(d, "h0", 31000, false);
  e.erase("KOLO_STORE_ADDR");
  expect_error(e, "KOLO_WORKER_ID is set but KOLO_STORE_ADDR is not");
  // A fixed-size kolorun rank is no elastic worker, whatever else is set.
  e.insert({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "2"}, {"KOLO_STORE_ADDR", "h0:31000"}});
  EXPECT_EQ(discover(e).worker_id, "");
}

TEST(Discover, StoreAddressOverridesEveryLauncher) {
  Env e = slurm_env();
  e["KOLO_STORE_ADDR"] = "head:31000";
  expect_store(discover(e), "head", 31000, true);
  Discovery mpi = discover({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                            {"KOLO_STORE_ADDR", "[fe80::1]:29500"}});
  expect_store(mpi, "fe80::1", 29500, true);
}

TEST(Discover, EmptyValuesCountAsUnset) {
  EXPECT_EQ(discover({{"RANK", ""}, {"WORLD_SIZE", ""}}).source, "single");
}

TEST(Discover, NonIntegerValues) {
  expect_error({{"RANK", "one"}, {"WORLD_SIZE", "4"}}, "rendezvous: RANK=one is not an integer");
  expect_error({{"RANK", "1"}, {"WORLD_SIZE", "4x"}}, "WORLD_SIZE=4x is not an integer");
  expect_error({{"KOLO_RANK", "1"}, {"KOLO_SIZE", "99999999999"}}, "KOLO_SIZE=99999999999 is not an integer");
  expect_error({{"OMPI_COMM_WORLD_RANK", " 1"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
               "OMPI_COMM_WORLD_RANK= 1 is not an integer");
  Env e = slurm_env();
  e["SLURM_NODEID"] = "n2";
  expect_error(e, "SLURM_NODEID=n2 is not an integer");
}

TEST(Discover, SizeBelowOne) {
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "rendezvous: WORLD_SIZE=0 must be at least 1");
  expect_error({{"PMI_RANK", "0"}, {"PMI_SIZE", "-2"}}, "PMI_SIZE=-2 must be at least 1");
}

TEST(Discover, RankOutOfRange) {
  expect_error({{"RANK", "5"}, {"WORLD_SIZE", "4"}}, "rendezvous: RANK=5 is not below WORLD_SIZE=4");
  expect_error({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, "RANK=4 is not below WORLD_SIZE=4");
  expect_error({{"KOLO_RANK", "-1"}, {"KOLO_SIZE", "4"}}, "KOLO_RANK=-1 must not be negative");
}

TEST(Discover, LocalRankOutOfRange) {
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
               "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "-1"}, {"LOCAL_WORLD_SIZE", "2"}},
               "LOCAL_RANK=-1 must not be negative");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}},
               "LOCAL_WORLD_SIZE=0 must be at least 1");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "8"}},
               "LOCAL_WORLD_SIZE=8 exceeds WORLD_SIZE=4");
  Env e = slurm_env();
  e["SLURM_LOCALID"] = "2";
  expect_error(e, "SLURM_LOCALID=2 is not below SLURM_TASKS_PER_NODE=2");
}

TEST(Discover, PartialSets) {
  expect_error({{"RANK", "0"}}, "rendezvous: RANK is set but WORLD_SIZE is not (torchrun environment)");
  expect_error({{"WORLD_SIZE", "2"}}, "WORLD_SIZE is set but RANK is not");
  expect_error({{"KOLO_SIZE", "2"}}, "KOLO_SIZE is set but KOLO_RANK is not (kolo environment)");
  expect_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
               "OMPI_COMM_WORLD_LOCAL_RANK is set but OMPI_COMM_WORLD_LOCAL_SIZE is not (openmpi environment)");
  expect_error({{"PMI_RANK", "0"}}, "PMI_RANK is set but PMI_SIZE is not (mpich environment)");
  expect_error({{"SLURM_PROCID", "0"}}, "SLURM_PROCID is set but SLURM_NTASKS is not (slurm environment)");
  expect_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}},
               "MASTER_ADDR is set but MASTER_PORT is not");
}

TEST(Discover, MalformedStoreAddresses) {
  for (const char* bad : {"nohost", "host:", ":29500", "host:port", "host:0", "host:70000", "host:-1"}) {
    SCOPED_TRACE(bad);
    const std::string e = error_of([&] { discover({{"KOLO_STORE_ADDR", bad}}); });
    EXPECT_NE(e.find(std::string("KOLO_STORE_ADDR=") + bad), std::string::npos) << e;
  }
  expect_error({{"KOLO_STORE_ADDR", "host:70000"}},
               "rendezvous: KOLO_STORE_ADDR=host:70000 is not host:port with a port in 1-65535");
}

TEST(Discover, MalformedMasterPort) {
  Env e{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "http"}};
  expect_error(e, "MASTER_PORT=http is not an integer");
  e["MASTER_PORT"] = "65536";
  expect_error(e, "MASTER_PORT=65536 is not a TCP port");
  e["MASTER_PORT"] = "65535";
  e["TORCHELASTIC_RUN_ID"] = "x";
  expect_error(e, "MASTER_PORT=65535 leaves no port");
}

TEST(Discover, CurrentEnvironmentReadsTheProcessEnvironment) {
  test::ScopedEnv v("KOLO_TEST_DISCOVERY_VAR", "a=b");
  EXPECT_EQ(current_environment().at("KOLO_TEST_DISCOVERY_VAR"), "a=b");
}

}  // namespace
}  // namespace kolo::rdv
