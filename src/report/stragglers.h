// The straggler of each collective: the rank every other rank waited for,
// found when every rank's arrivals are in one place (the merge at the end).
#pragma once

#include <string>

namespace kolo::detail::timeline {

// `tables`: every rank's lines "comm\tseq\tbegin\tend\tpid\ttid" (times in ns
// of the store host's clock), one per collective. Returns the "wait for rank
// L" spans, Chrome-trace events each followed by ",\n": per collective, every
// rank that started before the last one to arrive waited for it.
// tools/kolo-trace's merge does the same for the snapshots a killed job
// leaves (Python, for a file without a running job).
std::string straggler_spans(const std::string& tables);

}  // namespace kolo::detail::timeline
