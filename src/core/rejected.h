// The two errors of a collective that ranks disagree on (comm/context.h
// says which failures a communicator survives and why).
#pragma once

#include "core/error.h"

namespace kolo {

// Ranks called different collectives at the same position of the stream,
// seen in the fingerprints they exchange before any of the call's data is used.
class MismatchError : public Error {
 public:
  using Error::Error;
};

// Every rank rejected the collective at that check: nothing of it was used
// anywhere, the backend was rebuilt, and the communicator remains usable.
class RejectedError : public Error {
 public:
  using Error::Error;
};

}  // namespace kolo
