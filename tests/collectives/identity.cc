// Prints what kolo::init() discovered and proves the job works with one
// allreduce: "identity rank=1 size=3 local_rank=1 local_size=3 transport=shm sum=6".
#include <cstdio>
#include <cstdint>

#include "kolo/kolo.h"

int main() {
  try {
    kolo::Communicator comm = kolo::init();
    std::int64_t x = comm.rank() + 1;
    comm.allreduce(&x, 1);
    std::printf("identity rank=%d size=%d local_rank=%d local_size=%d transport=%s sum=%lld\n",
                comm.rank(), comm.size(), comm.local_rank(), comm.local_size(),
                comm.transport().c_str(), static_cast<long long>(x));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
