// The agent: `kolorun --kolorun-agent`, started by the launching kolorun on
// each host of a multi-host job (over ssh, or directly on the launching
// host). It reads its job from stdin (agent_protocol.h), starts that host's
// ranks as kolorun starts local ranks (spawn.h: own process group, death with
// the agent, stdin /dev/null), and supervises them with the same supervisor,
// sending their output and exits back as frames instead of printing them.
//
// The agent never outlives its launcher: when its stdin ends (ssh closed,
// kolorun died) or no frame arrived for the job's silence limit (the link is
// down), it SIGKILLs its ranks and exits. A stop frame from the launcher is
// handled as kolorun handles a signal: the ranks get it, SIGKILL after the
// grace period. A rank that fails makes the agent stop its host's other
// ranks at once, while the launcher stops the other hosts.
#pragma once

namespace kolorun {

inline constexpr const char* kAgentFlag = "--kolorun-agent";

// Runs the agent; returns its exit code (0 after a job ran, whatever its
// ranks did: the launcher learned that from the frames; 1 when it could not
// talk to the launcher).
int agent_main();

}  // namespace kolorun
