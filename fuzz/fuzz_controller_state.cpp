// libFuzzer target: controller_state.safetensors loaded into the window policy of a small model (2 layers x 4
// heads, windows 4, 8, 16, 32), as resuming a run or `aah generate` does.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "fuzz_small_model.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model/window_policy.h"

using namespace aah;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Config cfg = fuzz::small_config();
  static Model<float> model(cfg.model, 1, cfg.train.context, false);
  static WindowPolicyRunner policy(cfg, model);
  static const ControllerConfig ccfg = controller_config_of(cfg);
  const int L = cfg.model.num_hidden_layers, H = cfg.model.num_attention_heads;
  fuzz::accepts([&] {
    SafetensorsReader r(ByteSource::memory(fuzz::bytes_of(data, size), "controller_state.safetensors", "[safetensors]"));
    policy.load(r);
    // A fresh controller with the loaded state keeps working: windows stay valid through further updates (which
    // use the loaded hierarchy, EMAs and scorer weights).
    Controller c(ccfg, L, H);
    c.load(r);
    std::vector<double> raw(size_t(H) * kControllerFeatures);
    for (int step = 0; step <= 2 * ccfg.control_interval; step += ccfg.control_interval)
      for (int l = 0; l < L; l++) {
        for (size_t i = 0; i < raw.size(); i++) raw[i] = 0.1 + 0.01 * double((i * 7 + size_t(l) + size_t(step)) % 13);
        for (int w : c.update(l, ControlInput::of_features(raw.data()), step)) AAH_FUZZ_ASSERT(w >= 1);
      }
    c.acr();
    c.exact_pair_ratio(cfg.train.context);
    c.window_bucket_fractions();
    c.mean_levels_used();
  });
  return 0;
}
