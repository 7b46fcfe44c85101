// Writes the seed corpus of every fuzz target: small valid inputs made by aah's own writers, so the seeds follow
// the formats as they change. Usage: make_seeds DIR  (writes DIR/<target>/seed-*). fuzz/corpus/ holds the output
// committed, plus hand-made inputs and the reduced inputs of crashes found (regress-*).
#include <cstdio>
#include <string>
#include <vector>

#include "controller/features.h"
#include "core/check.h"
#include "fuzz_small_model.h"
#include "text/bpe_train.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"
#include "data/synth.h"
#include "model/config.h"
#include "model/model.h"
#include "model/window_policy.h"

using namespace aah;

namespace {

std::string dir_of(const std::string& root, const char* target) {
  const std::string d = root + "/" + target;
  make_dirs(d);
  return d + "/";
}

void safetensors_seeds(const std::string& d) {
  const float f32[6] = {1.0f, -2.5f, 0.0f, 3e38f, -1e-40f, 0.5f};
  const uint16_t b16[4] = {0x3f80, 0xc020, 0x7f80, 0x0001};
  const uint16_t h16[3] = {0x3c00, 0xfc00, 0x0001};
  const double f64[2] = {1.0, -1e300};
  const int32_t i32[3] = {1, -2, 2147483647};
  const int64_t i64[1] = {-5};
  const uint8_t u8[5] = {0, 1, 2, 254, 255};
  SafetensorsWriter w;
  w.add_f32("a.weight", f32, {2, 3});
  w.add_raw("b", "BF16", b16, sizeof b16, {4});
  w.add_raw("h", "F16", h16, sizeof h16, {3, 1});
  w.add_raw("d", "F64", f64, sizeof f64, {2});
  w.add_raw("i", "I32", i32, sizeof i32, {3});
  w.add_raw("l", "I64", i64, sizeof i64, {1});
  w.add_raw("u", "U8", u8, sizeof u8, {5});
  w.add_raw("empty", "F32", nullptr, 0, {0, 4});
  w.set_metadata("format", "pt");
  w.set_metadata("step", "10");
  w.write(d + "seed-dtypes.safetensors");
  SafetensorsWriter e;
  e.write(d + "seed-empty.safetensors");
  SafetensorsWriter s;
  s.add_f32("x", f32, {});  // a scalar
  s.write(d + "seed-scalar.safetensors");
}

void shard_seeds(const std::string& d) {
  shard_write(d + "seed-u16.bin", {0, 1, 2, 3, 99, 42, 7}, 100);
  shard_write(d + "seed-u32.bin", {0, 69999, 65536, 5}, 70000);
  shard_write(d + "seed-empty.bin", {}, 2);
}

void tokenizer_seeds(const std::string& d) {
  SynthOptions so;
  so.vocab_size = 24;
  so.keys = 4;
  write_file_atomic(d + "seed-wordlevel.json", synth_tokenizer_json(so).dump() + "\n");
  // Byte-level BPE as aah trains it (NFC, Qwen's Split regex, ByteLevel), a few merges.
  BpeTrainOptions bo;
  bo.vocab_size = 256 + 8 + 1;
  const std::string text = "the cat sat on the mat; the hat. 123 4567 <|endoftext|> caf\xc3\xa9 the the";
  write_file_atomic(d + "seed-bpe.json", bpe_train({text}, bo).dump() + "\n");
  // A tiny hand-written GPT-2 style one: only the tokens it needs, with added tokens and a Sequence pre-tokenizer.
  write_file_atomic(d + "seed-tiny.json", R"({"version":"1.0","added_tokens":[
 {"id":6,"content":"<|endoftext|>","special":true,"lstrip":false,"rstrip":false,"single_word":false,"normalized":false},
 {"id":7,"content":"<pad>","special":false,"lstrip":true,"rstrip":true,"single_word":true,"normalized":true}],
 "normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"}]},
 "pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},
   {"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]},
 "decoder":{"type":"ByteLevel"},
 "model":{"type":"BPE","dropout":null,"unk_token":null,"ignore_merges":false,
   "vocab":{"a":0,"b":1,"Ġ":2,"ab":3,"Ġa":4,"1":5},"merges":["a b",["Ġ","a"]]}}
)");
}

void config_seeds(const std::string& d) {
  write_file_atomic(d + "seed-default.json", config_to_json(Config{}).dump() + "\n");
  write_file_atomic(d + "seed-small.json", config_to_json(fuzz::small_config()).dump() + "\n");
  write_file_atomic(d + "seed-set.txt",
                    "{\"hidden_size\": 64, \"train\": {\"lr\": 0.001}, \"aah\": {\"regime\": \"full_adaptive\"}}"
                    "\n--set train.context=64\n--set aah.windows=[8,16,32,64]\n--set aah.tau=0.99"
                    "\n--set aah.attention=dense\n--set train.checkpoint_steps=[10,20]\n--set aah.topology=freeze");
}

void weights_index_seeds(const std::string& d) {
  Model<float> model(fuzz::small_config().model, 1, 8, false);
  nlohmann::json j = {{"metadata", {{"total_size", model.num_params() * 4}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const ParamTensor& t : model.tensors())
    j["weight_map"][t.name] = i++ % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  write_file_atomic(d + "seed-index.json", j.dump() + "\n");
}

void controller_state_seeds(const std::string& d) {
  const Config cfg = fuzz::small_config();
  Model<float> model(cfg.model, 1, cfg.train.context, false);
  WindowPolicyRunner policy(cfg, model);
  SafetensorsWriter fresh;
  policy.save(fresh);
  fresh.write(d + "seed-fresh.safetensors");
  // After a few updates the state has a hierarchy (topology, groups) and EMAs.
  const int H = cfg.model.num_attention_heads;
  std::vector<double> raw(size_t(H) * kControllerFeatures);
  const int interval = policy.controller().config().control_interval;
  for (int step = 0; step <= 3 * interval; step += interval)
    for (int l = 0; l < cfg.model.num_hidden_layers; l++) {
      for (size_t i = 0; i < raw.size(); i++) raw[i] = 0.1 + 0.05 * double((i * 5 + size_t(l * 3 + step)) % 11);
      policy.controller().update(l, ControlInput::of_features(raw.data()), step);
    }
  SafetensorsWriter after;
  policy.save(after);
  after.set_metadata("step", std::to_string(3 * interval));
  after.write(d + "seed-updated.safetensors");
}

// A finished run's metrics.jsonl (an event line, evaluation lines) and its eval.json, as aah writes them.
void report_seeds(const std::string& d) {
  write_file_atomic(d + "seed-metrics",
                    "{\"step\":5,\"loss\":6.1,\"attn_ratio\":1.0,\"pair_ratio\":1.0,\"attn_work_ratio\":1.0,"
                    "\"tokens_per_s\":3000.5,\"peak_rss_mb\":19.0,\"levels_used\":0,\"window_fractions\":{\"128\":1.0}}\n"
                    "{\"step\":6,\"event\":\"loss_spike\",\"loss\":19.5,\"mean\":6.0}\n"
                    "{\"step\":10,\"loss\":5.9,\"attn_ratio\":0.5,\"pair_ratio\":0.6,\"attn_work_ratio\":0.7,"
                    "\"tokens_per_s\":2999,\"peak_rss_mb\":19.5,\"levels_used\":2.5,\"val_loss\":5.8,\"val_ppl\":330.3}\n");
  write_file_atomic(d + "seed-eval",
                    "{\"regime\":\"full_adaptive\",\"val_loss\":5.5,\"val_ppl\":244.7,\"tokens\":2048,\"windows\":16,"
                    "\"context\":128,\"inference_acr\":0.8,\"window_fractions\":{\"16\":0.25,\"128\":0.75},"
                    "\"pair_ratio\":0.85,\"attn_work_ratio\":0.9,\"tokens_per_s\":5000,\"peak_rss_mb\":14,"
                    "\"window_map\":[[16,128],[128,128]],\"windows_decided_at_eval\":false}\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  try {
    const std::string root = argv[1];
    safetensors_seeds(dir_of(root, "fuzz_safetensors"));
    shard_seeds(dir_of(root, "fuzz_shard"));
    tokenizer_seeds(dir_of(root, "fuzz_tokenizer"));
    config_seeds(dir_of(root, "fuzz_config"));
    weights_index_seeds(dir_of(root, "fuzz_weights_index"));
    controller_state_seeds(dir_of(root, "fuzz_controller_state"));
    report_seeds(dir_of(root, "fuzz_report"));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
