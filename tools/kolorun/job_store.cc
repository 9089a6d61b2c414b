#include "job_store.h"

#include <fmt/format.h>

#include "net/auth.h"

namespace kolorun {

std::unique_ptr<kolo::rdv::StoreServer> start_job_store(const std::string& bind_host,
                                                        const std::string& advertise_host, JobIdentity& job) {
  job.job_id = random_hex(8);
  job.secret = random_hex(16);
  auto store = std::make_unique<kolo::rdv::StoreServer>(bind_host, 0, kolo::auth::Key::from_secret(job.secret));
  job.store_addr = fmt::format("{}:{}", advertise_host, store->port());
  return store;
}

}  // namespace kolorun
