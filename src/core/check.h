// CHECK macros and the one exception type aah throws. Errors name the op or file that failed:
//   "[safetensors] tensor 'wq' has shape (64, 32), checkpoint says (64, 64)"
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace aah {

// Every user-facing failure is an aah::Error; the CLI prints what() on one line and exits non-zero.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... A>
std::string str_cat(const A&... a) {
  std::ostringstream s;
  (s << ... << a);
  return s.str();
}

template <class... A>
[[noreturn]] void fail(const A&... a) {
  throw Error(str_cat(a...));
}

}  // namespace aah

// Internal invariant: a failure is a bug in aah, reported with file:line.
#define AAH_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond))                                                                              \
      ::aah::fail(__FILE__, ":", __LINE__, ": check failed: " #cond " " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
