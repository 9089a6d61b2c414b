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

// kolorun's own environment with the KOLO_* variables of `rank` set (any
// inherited values of those names are replaced), as "NAME=value" strings.
std::vector<std::string> rank_environment(int rank, int size, const JobIdentity& job);

}  // namespace kolorun
