// Shared by the libFuzzer targets: each feeds the bytes to one reader, in memory. An aah::Error is the expected
// outcome for bad input; anything else (a sanitizer report, an uncaught std exception such as
// nlohmann::json::type_error or std::bad_alloc, a trap) is a bug that libFuzzer reports as a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/check.h"

namespace aah::fuzz {

inline std::string bytes_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// Runs f; true if it returned, false if it threw aah::Error.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// A property that must hold for every input (a failed one is a bug): abort so libFuzzer saves the input.
#define AAH_FUZZ_ASSERT(cond)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)

}  // namespace aah::fuzz
