// Hugging Face checkpoints: a tiny random Qwen3 in bf16, sharded with model.safetensors.index.json, loads into
// the same fp32 weights (bf16-rounded) and gives the same logits as the fp32 original rounded the same way.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "io/files.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace aah {
namespace {

TEST(Weights, ShardedBf16HuggingFaceCheckpoint) {
  ModelConfig m;
  m.hidden_size = 32;
  m.intermediate_size = 48;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 8;
  m.vocab_size = 40;
  m.tie_word_embeddings = false;
  Model<float> src(m, 1, 16, false);
  src.init_weights(9);
  // bf16 copies of every tensor, split over two shards
  std::vector<std::vector<uint16_t>> bf(src.tensors().size());
  SafetensorsWriter shard[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < src.tensors().size(); i++) {
    const ParamTensor& t = src.tensors()[i];
    bf[i].resize(t.numel);
    for (size_t e = 0; e < t.numel; e++) bf[i][e] = f32_to_bf16(src.params_data()[t.offset + e]);
    const int s = i < src.tensors().size() / 2 ? 0 : 1;
    shard[s].add_raw(t.name, "BF16", bf[i].data(), t.numel * 2, t.shape);
    index["weight_map"][t.name] = s == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  char tmpl[] = "/tmp/aah_hf_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  shard[0].write(dir + "/model-00001-of-00002.safetensors");
  shard[1].write(dir + "/model-00002-of-00002.safetensors");
  write_file_atomic(dir + "/model.safetensors.index.json", index.dump());

  Model<float> loaded(m, 1, 16, false);
  weights_load_dir(dir, loaded);
  for (size_t i = 0; i < src.tensors().size(); i++) {
    const ParamTensor& t = src.tensors()[i];
    for (size_t e = 0; e < t.numel; e++)
      ASSERT_EQ(loaded.params_data()[t.offset + e], bf16_to_f32(bf[i][e])) << t.name << "[" << e << "]";
  }
  // a tensor missing from the index is an error naming it
  index["weight_map"].erase("model.norm.weight");
  write_file_atomic(dir + "/model.safetensors.index.json", index.dump());
  try {
    weights_load_dir(dir, loaded);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
  // a shard name that escapes the directory is refused
  index["weight_map"]["model.norm.weight"] = "../etc/passwd";
  write_file_atomic(dir + "/model.safetensors.index.json", index.dump());
  EXPECT_THROW(weights_load_dir(dir, loaded), Error);
}

}  // namespace
}  // namespace aah
