// libFuzzer target: a safetensors file (model weights, training state, controller state all use this reader).
// Validates the header, then reads every tensor as the loaders do (fp32 conversion or raw bytes).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_common.h"
#include "formats/safetensors.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::accepts([&] {
    SafetensorsReader r(ByteSource::memory(fuzz::bytes_of(data, size), "fuzz.safetensors", "[safetensors]"));
    for (const SafetensorsTensor& t : r.tensors()) {
      // The header was validated against the file: every tensor's bytes lie inside it.
      AAH_FUZZ_ASSERT(t.begin <= t.end && t.end <= size);
      const size_t n = size_t(t.numel());
      if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64") {
        std::vector<float> v(n);
        r.read_f32(t.name, v.data(), t.shape);
      }
      std::vector<unsigned char> raw(t.end - t.begin);
      r.read_raw(t.name, t.dtype, raw.data(), t.shape);
      // A wrong expected shape or dtype is an error, not a read.
      fuzz::accepts([&] { r.read_raw(t.name, t.dtype, raw.data(), {int64_t(n) + 1}); });
    }
    fuzz::accepts([&] { r.tensor("no such tensor"); });
  });
  return 0;
}
