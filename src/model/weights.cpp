#include "model/weights.h"

#include <set>

#include "core/check.h"
#include "core/files.h"
#include "formats/safetensors.h"

namespace aah {

void weights_save(const std::string& path, Model<float>& model, const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w;
  w.require_finite();  // weights with a NaN or an infinity are never saved
  const HostCopy<float> params(model.backend->memory, model.params_data(), model.num_params());
  for (const ParamTensor& t : model.tensors()) w.add_f32(t.name, params.data() + t.offset, t.shape);
  for (auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

std::map<std::string, std::string> weights_load(const std::string& path, Model<float>& model) {
  SafetensorsReader r(path);
  std::set<std::string> expected;
  HostStage<float> params(model.backend->memory, model.params_data(), model.num_params());
  for (const ParamTensor& t : model.tensors()) {
    expected.insert(t.name);
    if (!r.has(t.name)) fail("[weights] ", path, ": tensor '", t.name, "' is missing");
    r.read_f32(t.name, params.data() + t.offset, t.shape);
  }
  params.commit();
  for (const auto& t : r.tensors())
    if (!expected.count(t.name) && !(t.name == "lm_head.weight" && model.config().tie_word_embeddings))
      fail("[weights] ", path, ": unexpected tensor '", t.name, "' (tie_word_embeddings or layer count differ?)");
  return r.metadata();
}

void weights_load_dir(const std::string& dir, Model<float>& model) {
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (path_exists(single)) {
    weights_load(single, model);
    return;
  }
  if (!path_exists(index)) fail("[weights] ", dir, ": neither model.safetensors nor model.safetensors.index.json");
  std::vector<std::string> names;
  std::map<std::string, const ParamTensor*> by_name;
  for (const ParamTensor& t : model.tensors()) {
    names.push_back(t.name);
    by_name[t.name] = &t;
  }
  HostStage<float> params(model.backend->memory, model.params_data(), model.num_params());
  for (auto& [file, tensors] : weights_index_shards(read_json_file(index), names, index)) {
    SafetensorsReader r(dir + "/" + file);
    for (const std::string& name : tensors) {
      const ParamTensor* t = by_name.at(name);
      if (!r.has(name)) fail("[weights] ", r.path(), ": tensor '", name, "' is missing (index.json says it is here)");
      r.read_f32(name, params.data() + t->offset, t->shape);
    }
  }
  params.commit();
}

std::map<std::string, std::vector<std::string>> weights_index_shards(const nlohmann::json& j,
                                                                     const std::vector<std::string>& names,
                                                                     const std::string& index) {
  if (!j.is_object()) fail("[weights] ", index, ": not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) fail("[weights] ", index, ": no \"weight_map\" object");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (const std::string& name : names) {
    auto f = wm->find(name);
    if (f == wm->end()) fail("[weights] ", index, ": tensor '", name, "' is not in weight_map");
    if (!f->is_string()) fail("[weights] ", index, ": weight_map['", name, "'] is not a file name");
    const std::string& file = f->get_ref<const std::string&>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      fail("[weights] ", index, ": weight_map['", name, "'] is not the name of a file in the directory");
    by_shard[file].push_back(name);
  }
  return by_shard;
}

Config run_config_load(const std::string& run_dir) {
  const std::string path = run_dir + "/config.json";
  if (!path_exists(path)) fail("[run] ", run_dir, ": no config.json (is this a run directory?)");
  Config cfg;
  config_apply_json(cfg, read_json_file(path), path);
  config_validate(cfg);
  return cfg;
}

}  // namespace aah
