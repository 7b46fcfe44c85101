// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/check.h"

namespace aah::test {

// The error message of f(), or "" (and a test failure) if it does not throw aah::Error.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an aah::Error";
  return "";
}

}  // namespace aah::test
