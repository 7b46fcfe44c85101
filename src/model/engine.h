// A configured engine, built in one place for train, eval, probe, generate and the benches: the model on the
// backend aah.attention names (kernels/backend.h), its weights (a run's or a Hugging Face directory's, or
// initialized from train.seed), and the window policy that sets its windows, with its state restored from a run.
#pragma once
#include <optional>
#include <string>

#include "model/config.h"
#include "model/model.h"
#include "model/window_policy.h"

namespace aah {

// What to build: EngineOptions(batch, context) then what applies, e.g. EngineOptions(8, 256).load(run).restore(state).
struct EngineOptions {
  EngineOptions(int batch, int context) : batch(batch), context(context) {}
  int batch;                     // the largest micro-batch B it runs
  int context;                   // the longest sequence T it runs
  bool with_grads = false;       // training: gradients and the activations backward needs
  std::string weights;           // a run or Hugging Face model directory to load; "": init_weights(cfg.train.seed)
  bool window_policy = true;     // false: no policy (the windows stay full unless set by hand)
  std::string controller_state;  // a controller_state.safetensors whose windows and state the policy restores
  EngineOptions& training() { return with_grads = true, *this; }
  EngineOptions& load(std::string dir) { return weights = std::move(dir), *this; }
  EngineOptions& restore(std::string state) { return controller_state = std::move(state), *this; }
  EngineOptions& no_policy() { return window_policy = false, *this; }
};

class Engine {
 public:
  Engine(const Config& cfg, const EngineOptions& o);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Model<float> model;
  std::optional<WindowPolicyRunner> policy;  // after the model: it hooks into it, and leaves first
};

}  // namespace aah
