// Whether the collective running on this thread overlaps its caller's work.
// The engine's background thread runs asynchronous collectives while the
// thread that issued them goes on computing (a backward pass); a blocking
// collective runs on the caller's own thread, which has nothing else to do.
// Waits use it to decide whether spinning may take a core from compute.
#pragma once

namespace kolo {

inline thread_local bool overlaps_caller = false;

}  // namespace kolo
