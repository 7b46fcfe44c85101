// libFuzzer target: model.safetensors.index.json (weight_map: tensor -> shard file) against the tensor names of
// a small model.
#include <cstdio>
#include <cstdlib>

#include "fuzz_common.h"
#include "fuzz_small_model.h"
#include "core/files.h"
#include "model/model.h"
#include "model/weights.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    Model<float> model(fuzz::small_config().model, 1, 8, false);
    for (const ParamTensor& t : model.tensors()) v.push_back(t.name);
    return v;
  }();
  fuzz::accepts([&] {
    const std::string index = "fuzz/model.safetensors.index.json";
    for (auto& [file, tensors] : weights_index_shards(parse_json(fuzz::bytes_of(data, size), index), names, index)) {
      AAH_FUZZ_ASSERT(!file.empty() && file != "." && file != ".." && file.find('/') == std::string::npos &&
                      file.find('\0') == std::string::npos);
      AAH_FUZZ_ASSERT(!tensors.empty());
    }
  });
  return 0;
}
