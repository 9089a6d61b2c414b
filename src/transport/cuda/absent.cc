// kolo built without CUDA (CMake found no CUDA toolkit, or -DKOLO_CUDA=OFF):
// the same interface, and a clear error where CUDA memory is asked for.
#include "core/error.h"
#include "transport/gpu.h"

namespace kolo::gpu {

namespace {
[[noreturn]] void not_built(const char* what) {
  fail("{}: the buffers are CUDA memory (Place::cuda), but this kolo was built without CUDA: rebuild it "
       "where the CUDA toolkit is installed (CMake finds nvcc on PATH or in /usr/local/cuda; "
       "-DKOLO_CUDA=ON makes its absence an error)",
       what);
}
}  // namespace

bool built() { return false; }

void check(const char* what, const Place&, std::initializer_list<Buffer>) { not_built(what); }

std::unique_ptr<Plane> make_plane(int, bool, Farewell) { not_built("a collective"); }

std::string planned_plane(int, bool) { return "none"; }

std::shared_ptr<void> allocate(std::size_t, const Place&) { not_built("a gradient bucket"); }
void convert(void*, DType, const void*, DType, std::size_t, double, const Place&) {
  not_built("a gradient bucket");
}
void zero(void*, std::size_t, const Place&) { not_built("a gradient bucket"); }

}  // namespace kolo::gpu
