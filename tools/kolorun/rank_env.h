// What a rank learns from kolorun through its environment: who it is, how
// many ranks there are, where the rendezvous store listens, and the job's
// identity and shared secret.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

struct JobIdentity {
  std::string store_addr;  // "127.0.0.1:PORT"
  std::string job_id;      // 16 hex digits
  std::string secret;      // 32 hex digits
};

// `bytes` random bytes from /dev/urandom as lower-case hex; throws
// std::runtime_error when /dev/urandom cannot be read.
std::string random_hex(std::size_t bytes);

// The KOLO_* variables of one rank ("NAME=value"); `iface`
// (--network-interface) becomes KOLO_IFACE when not empty.
std::vector<std::string> kolo_variables(int rank, int size, int local_rank, int local_size,
                                        const JobIdentity& job, const std::string& iface);

// An elastic job's worker (elastic_driver.h): its id instead of a rank (it
// learns rank and size from the store), and how long it waits there; torchrun's
// variables inherited from an outer job are removed (torchrun_env.h).
std::vector<std::string> elastic_variables(const std::string& worker_id, const JobIdentity& job,
                                           const std::string& iface, double elastic_timeout_s);

// Every KOLO_* variable of this process ("NAME=value"): kolo's settings are
// job-wide, so kolorun hands the launching host's to every rank on every host
// (a remote login's environment has none of them). Left out: the variables
// kolo_variables() sets per rank and KOLO_HOSTNAME, which names the host it is
// set on.
std::vector<std::string> kolo_settings();

// This process's environment with `overrides` ("NAME=value") replacing or
// adding variables of those names (a KOLO_RANK inherited from an outer job,
// kolorun started from inside a rank, is replaced rather than duplicated); a
// bare "NAME" removes that variable.
std::vector<std::string> environment_with(const std::vector<std::string>& overrides);

}  // namespace kolorun
