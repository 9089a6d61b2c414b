#include "report/stragglers.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "report/trace_file.h"

namespace kolo::detail::timeline {

namespace {

struct Row {
  int pid, tid;
  std::int64_t begin, end;
};

}  // namespace

std::string straggler_spans(const std::string& tables) {
  std::map<std::pair<std::string, std::uint64_t>, std::vector<Row>> by_call;
  std::istringstream in(tables);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string comm;
    std::uint64_t seq;
    Row r;
    if (std::getline(f, comm, '\t') && f >> seq >> r.begin >> r.end >> r.pid >> r.tid)
      by_call[{comm, seq}].push_back(r);
  }
  std::string out;
  for (const auto& [call, rows] : by_call) {
    if (rows.size() < 2) continue;
    const Row& last = *std::max_element(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.begin < b.begin; });
    for (const Row& r : rows) {
      const std::int64_t until = std::min(last.begin, r.end);
      if (&r == &last || until - r.begin < 1000) continue;  // under a microsecond: clock noise
      out += fmt::format(
          "{{\"ph\": \"X\", \"cat\": \"wait\", \"name\": \"wait for rank {}\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, "
          "\"dur\": {:.3f}, \"args\": {{\"straggler\": {}, \"comm\": {}, \"seq\": {}}}}},\n",
          last.pid, r.pid, r.tid, r.begin / 1000.0, (until - r.begin) / 1000.0, last.pid, json_string(call.first),
          call.second);
    }
  }
  return out;
}

}  // namespace kolo::detail::timeline
