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

struct EngineOptions {
  int batch = 1;            // the largest micro-batch B it runs
  int context = 0;          // the longest sequence T it runs; 0: cfg.train.context
  bool with_grads = false;  // training: gradients and the activations backward needs
  std::string weights;      // a run or Hugging Face model directory to load; "": init_weights(cfg.train.seed)
  bool window_policy = true;     // false: no policy (the windows stay full unless set by hand)
  std::string controller_state;  // a controller_state.safetensors whose windows and state the policy restores
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
