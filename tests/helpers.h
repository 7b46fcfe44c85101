// Small helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/check.h"

// AAH_ASAN is 1 in a build with AddressSanitizer (the asan preset, scripts/sanitize.sh): timing assertions do not
// hold there; a test too slow there can skip itself with AAH_SKIP_UNDER_ASAN("why") (none needs to yet: the whole
// suite runs in about 4.5 minutes under ASan + UBSan on 2 cores).
#if defined(__SANITIZE_ADDRESS__)
#define AAH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AAH_ASAN 1
#endif
#endif
#ifndef AAH_ASAN
#define AAH_ASAN 0
#endif
#define AAH_SKIP_UNDER_ASAN(why)                            \
  do {                                                      \
    if (AAH_ASAN) GTEST_SKIP() << "too slow under ASan: " << why; \
  } while (0)

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
