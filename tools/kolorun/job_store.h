// The job's identity and the rendezvous store kolorun hosts for it.
#pragma once

#include <memory>
#include <string>

#include "rank_env.h"
#include "rendezvous/store.h"

namespace kolorun {

// Draws the job's id and secret, starts the store on bind_host (port 0: the
// kernel picks a free port, so concurrent jobs never collide) and sets
// job.store_addr to advertise_host:port. Only the job's ranks, which know the
// secret, get past the store's handshake. Throws what the store throws.
std::unique_ptr<kolo::rdv::StoreServer> start_job_store(const std::string& bind_host,
                                                        const std::string& advertise_host, JobIdentity& job);

}  // namespace kolorun
