// Ranks compare the settings that must agree (config::job_wide_settings())
// when the communicator forms.
//
// A rank's environment is its own: kolorun hands its KOLO_* variables to every
// rank on every host, but ranks started by mpirun, srun or a torchrun-style
// script may see different ones, and ranks that pick different transports,
// algorithms or chunk sizes would hang or compute garbage in their first
// collective (or time out connecting, blaming the network). So each rank
// publishes its settings in the store and reads everyone's, and a difference
// is an error on every rank, within the rendezvous, with one message naming
// each variable that differs, its values and the ranks and hosts holding them.
#pragma once

#include <string>

#include "rendezvous/hosts.h"
#include "rendezvous/store.h"

namespace kolo::rdv {

// Puts this process's settings in the store as rank `rank`'s (the first half
// of check_settings_agree; tests that stand in for a rank call it too).
void publish_settings(StoreClient& store, const std::string& prefix, int rank);

// Every rank calls it with the same prefix, after map_hosts().
void check_settings_agree(StoreClient& store, const std::string& prefix, int rank, int size,
                          const HostMap& hosts);

}  // namespace kolo::rdv
