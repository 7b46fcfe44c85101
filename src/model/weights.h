// Model weights as Hugging Face safetensors (tensor names of Qwen3ForCausalLM) and run-directory config.json.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace aah {

// Writes the weights (atomically, with a data checksum); refuses non-finite weights, naming the tensor.
void weights_save(const std::string& path, Model<float>& model, const std::map<std::string, std::string>& metadata);
// Loads every tensor by name with shape checks; missing or extra tensors are errors naming the file and tensor.
// Returns the file's metadata.
std::map<std::string, std::string> weights_load(const std::string& path, Model<float>& model);

// Loads the weights of a run or Hugging Face model directory: DIR/model.safetensors, or the shards listed in
// DIR/model.safetensors.index.json ("weight_map": tensor -> shard file). BF16, F16 and F32 tensors become fp32.
// A tied model accepts a file that also stores lm_head.weight (it must equal the embedding's shape).
void weights_load_dir(const std::string& dir, Model<float>& model);
// The shards of model.safetensors.index.json `j` (its path `index` in errors): shard file -> the tensors among
// `names` it holds. Every name must be in weight_map, and every file a plain name in the same directory.
std::map<std::string, std::vector<std::string>> weights_index_shards(const nlohmann::json& j,
                                                                     const std::vector<std::string>& names,
                                                                     const std::string& index);

// Reads RUN/config.json into a Config (defaults for anything it does not mention), validated.
Config run_config_load(const std::string& run_dir);

}  // namespace aah
