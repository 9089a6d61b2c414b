// Where check_collectives keeps the buffers it hands to kolo: host memory, or
// (--cuda) a CUDA device mirror of each host buffer. The jobs build and check
// their data in host memory; in CUDA mode the mirror is uploaded before a
// collective is issued and downloaded before it is checked, and kolo sees
// device pointers at the same offsets (in place stays in place).
// memory_cuda.cc where the tests are built with CUDA, memory_host.cc else.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "kolo/kolo.h"

namespace kolo::test {

// Exit code of a check that needs a GPU and found none: ctest reports the
// test as skipped (SKIP_RETURN_CODE), never as passed.
inline constexpr int kSkipped = 77;

// Switches to CUDA memory on `device` (a stream of its own); false with a
// message on stderr when no GPU can be used (or the tests were built without CUDA).
bool use_cuda(int device);
bool on_cuda();
// Where collectives run: Place::host(), or the CUDA device and stream.
Place place();

// Registers a host buffer to mirror (its device copy is made here in CUDA mode).
void mirror(char* host, std::size_t bytes);
void forget(char* host);
// The pointer kolo is given for host pointer p (inside a mirrored buffer).
char* at(char* p);
const char* at(const char* p);
// Copies host -> device (before a collective) and device -> host (before a check).
void upload(const char* host_base);
void download(char* host_base);
// Waits for everything queued on the test's stream (results read on the host).
void settle();
// CUDA mode: call(place()) while the test's stream is being captured into a
// CUDA graph (relaxed mode, so kolo's own threads are not held to it), then
// the capture ended and its graph dropped; what call threw ("" if nothing).
std::string while_captured(const std::function<void()>& call);

}  // namespace kolo::test
