// --output-dir: rank r's stdout and stderr go to DIR/rank.<r>.stdout and
// DIR/rank.<r>.stderr on the launching host, whichever host runs the rank.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

// Creates DIR and the 2*np files (truncated, close-on-exec), appending their
// descriptors to `files` in rank order, stdout before stderr. Returns false
// (after saying why on stderr) when DIR or a file cannot be created.
bool open_output_files(const std::string& dir, int np, std::vector<int>& files);

}  // namespace kolorun
