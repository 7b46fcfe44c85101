#include "model/weights.h"

#include <set>

#include "core/check.h"
#include "io/files.h"
#include "io/safetensors.h"

namespace aah {

void weights_save(const std::string& path, Model<float>& model, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  w.require_finite();  // weights with a NaN or an infinity are never saved
  for (const ParamTensor& t : model.tensors()) w.add_f32(t.name, model.params_data() + t.offset, t.shape);
  for (auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

std::map<std::string, std::string> weights_load(const std::string& path, Model<float>& model) {
  SafetensorsReader r(path);
  std::set<std::string> expected;
  for (const ParamTensor& t : model.tensors()) {
    expected.insert(t.name);
    if (!r.has(t.name)) fail("[weights] ", path, ": tensor '", t.name, "' is missing");
    r.read_f32(t.name, model.params_data() + t.offset, t.shape);
  }
  for (const auto& t : r.tensors())
    if (!expected.count(t.name) && !(t.name == "lm_head.weight" && model.config().tie_word_embeddings))
      fail("[weights] ", path, ": unexpected tensor '", t.name, "' (tie_word_embeddings or layer count differ?)");
  return r.metadata();
}

void weights_load_dir(const std::string& dir, Model<float>& model) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (file_exists(single)) {
    weights_load(single, model);
    return;
  }
  if (!file_exists(index)) fail("[weights] ", dir, ": neither model.safetensors nor model.safetensors.index.json");
  const nlohmann::json j = read_json_file(index);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("[weights] ", index, ": no \"weight_map\" object");
  // shard file -> tensors wanted from it
  std::map<std::string, std::vector<const ParamTensor*>> by_shard;
  for (const ParamTensor& t : model.tensors()) {
    if (!j["weight_map"].contains(t.name)) fail("[weights] ", index, ": tensor '", t.name, "' is not in weight_map");
    const auto& f = j["weight_map"][t.name];
    if (!f.is_string()) fail("[weights] ", index, ": weight_map['", t.name, "'] is not a file name");
    const std::string file = f.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "..")
      fail("[weights] ", index, ": weight_map['", t.name, "'] = '", file, "' is not a file in the directory");
    by_shard[file].push_back(&t);
  }
  for (auto& [file, tensors] : by_shard) {
    SafetensorsReader r(dir + "/" + file);
    for (const ParamTensor* t : tensors) {
      if (!r.has(t->name)) fail("[weights] ", r.path(), ": tensor '", t->name, "' is missing (index.json says it is here)");
      r.read_f32(t->name, model.params_data() + t->offset, t->shape);
    }
  }
}

Config run_config_load(const std::string& run_dir) {
  const std::string path = run_dir + "/config.json";
  if (!file_exists(path)) fail("[run] ", run_dir, ": no config.json (is this a run directory?)");
  Config cfg;
  config_apply_json(cfg, read_json_file(path), path);
  config_validate(cfg);
  return cfg;
}

}  // namespace aah
