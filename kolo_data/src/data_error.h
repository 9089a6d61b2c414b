// How kolo::data reports errors: kolo::Error (include/kolo/kolo.h), its text
// starting with the rank as every kolo message does. kolo_data sits above the
// core and sees its public API only, as kolo_torch does.
#pragma once

#include <fmt/format.h>

#include <string>
#include <system_error>

#include "kolo/kolo.h"

namespace kolo::data {

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(rank_prefix() + fmt::format(f, std::forward<Args>(args)...));
}

// errno as text, for system-call failures.
inline std::string errno_text(int err) { return std::generic_category().message(err); }

}  // namespace kolo::data
