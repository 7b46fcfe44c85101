// Model weights as Hugging Face safetensors (tensor names of Qwen3ForCausalLM) and run-directory config.json.
#pragma once
#include <map>
#include <string>

#include "model/config.h"
#include "model/model.h"

namespace aah {

void weights_save(const std::string& path, Model<float>& model, const std::map<std::string, std::string>& metadata);
// Loads every tensor by name with shape checks; missing or extra tensors are errors naming the file and tensor.
// Returns the file's metadata.
std::map<std::string, std::string> weights_load(const std::string& path, Model<float>& model);

// Reads RUN/config.json into a Config (defaults for anything it does not mention), validated.
Config run_config_load(const std::string& run_dir);

}  // namespace aah
