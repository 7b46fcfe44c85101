#include "model/weights.h"

#include <set>

#include "core/check.h"
#include "io/files.h"
#include "io/safetensors.h"

namespace aah {

void weights_save(const std::string& path, Model<float>& model, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
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
    if (!expected.count(t.name))
      fail("[weights] ", path, ": unexpected tensor '", t.name, "' (tie_word_embeddings or layer count differ?)");
  return r.metadata();
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
