#pragma once

#include <string>

namespace kolorun {

// Removes the job's shared-memory segments (/dev/shm/kolo-<job_id>-*) that a
// rank killed between creating and unlinking one could leave behind; returns
// how many were removed. Ranks normally unlink theirs right after mapping.
int sweep_shm(const std::string& job_id);

}  // namespace kolorun
