// Elastic membership: which processes form the job's communicator now.
//
// Under `kolorun --min-np N --max-np M --host-discovery-script S` (tools/
// kolorun/elastic_job.h) a process has no fixed rank. kolorun gives each one a
// worker id for life (KOLO_WORKER_ID) and publishes, in the job's store, a
// numbered sequence of generations: who is in the job, in rank order. A
// process's init() joins the newest generation that lists it and forms a
// communicator among exactly those workers, in a key space of that generation
// (nothing of an older one can be read by mistake). When a worker is lost the
// survivors' collectives fail (the engine's usual failure detection), and
// their next init() waits for the generation without it; when hosts are
// added, kolorun publishes a generation with their workers and the running
// ones learn it at their next check (kolo.torch.elastic's commit()). A
// communicator's members never change (DESIGN.md "Elastic"): every change
// is a new init().
//
// The store keys, written by kolorun (publish) and read by the workers:
//   kolo/elastic/gen<G>   the members of generation G, one per line in rank
//                         order: "<worker id> <host>"
//   kolo/elastic/latest   G of the newest generation, set after gen<G>
//   kolo/elastic/ready/<worker id>   set by a worker when its init() starts
//                         waiting: kolorun lists a new worker only once it
//                         has come this far (a program that never calls
//                         init() does not hold the others up)
//   kolo/elastic/formed/<worker id>  set by a worker once a communicator of
//                         its has formed: a job that ends stops the workers
//                         that never got that far (they joined too late)
#pragma once

#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::rdv::elastic {

struct Member {
  std::string worker;  // KOLO_WORKER_ID
  std::string host;    // the host kolorun started it on (for messages)
};

struct Place {
  int generation = -1;
  int rank = 0;
  int size = 0;
};

// The newest generation published so far; -1 before the first.
int latest(StoreClient& store);

// Marks this worker ready, then waits for a generation newer than `after`
// and returns this worker's place in it. Throws kolo::Error when the newest
// generation does not list this worker (the launcher dropped it: its host
// was lost or blacklisted) or when none comes within `timeout`.
Place join(StoreClient& store, const std::string& worker, int after, Millis timeout);

// This worker's communicator of `generation` has formed.
void mark_formed(StoreClient& store, const std::string& worker, int generation);
// kolorun's side: has this worker ever been in a formed communicator?
bool has_formed(StoreClient& store, const std::string& worker);

// kolorun's side: is this worker waiting in join()?
bool ready(StoreClient& store, const std::string& worker);
// kolorun's side: publishes `generation` (greater than every earlier one) and returns it.
int publish(StoreClient& store, int generation, const std::vector<Member>& members);

// The store key space of generation G's communicators.
std::string prefix(int generation);

}  // namespace kolo::rdv::elastic
