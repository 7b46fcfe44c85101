#include "model/engine.h"

#include "formats/safetensors.h"
#include "model/weights.h"

namespace aah {

Engine::Engine(const Config& cfg, const EngineOptions& o)
    : model(cfg.model, o.batch, o.context, o.with_grads, backend_for(cfg.aah.attention, cfg.train.precision)) {
  if (o.weights.empty())
    model.init_weights(uint64_t(cfg.train.seed));
  else
    weights_load_dir(o.weights, model);
  if (!o.window_policy) return;
  policy.emplace(cfg, model);
  if (!o.controller_state.empty()) policy->load(SafetensorsReader(o.controller_state));
}

}  // namespace aah
