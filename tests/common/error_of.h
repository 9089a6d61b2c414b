// What a test compares or searches when it expects kolo to refuse something:
// the text of the kolo::Error that f throws. When f throws none, "(no error)",
// and for another exception "(not a kolo::Error) " and its text — so a failed
// check on the text shows what happened instead. Header-only: used by gtest
// suites and by the programs kolorun starts alike.
#pragma once

#include <exception>
#include <string>

#include "kolo/kolo.h"

namespace kolo::test {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kolo::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not a kolo::Error) ") + e.what();
  }
  return "(no error)";
}

}  // namespace kolo::test
