// Runs the AAH controller inside a model's forward (spec section 5): on control-update steps each layer's windows
// are decided after q, k, v exist and before attention, from the batch's head features and the attention
// diagnostics collected at the previous update (policy coverage: from the attention mass within each candidate
// window, measured at full window from this layer's q and k, spec section 10); between updates the cached windows
// stay in force.
// Used by training, the benchmarks and evaluation, so all of them execute the same policy.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "kernels/backend.h"
#include "model/config.h"
#include "model/model.h"

namespace aah {

class Comm;
class SafetensorsReader;

class SafetensorsWriter;

class WindowPolicyRunner {
 public:
  // Builds the controller of cfg (regime + knobs) and installs itself as model.before_attention.
  WindowPolicyRunner(const Config& cfg, Model<float>& model);
  WindowPolicyRunner(const WindowPolicyRunner&) = delete;
  WindowPolicyRunner& operator=(const WindowPolicyRunner&) = delete;
  ~WindowPolicyRunner();

  // Call before a forward: `update` says whether this forward may run a control update (the first micro-batch of
  // an optimizer step); the runner asks the controller whether `step` is an update step.
  void begin_forward(int step, bool update);
  void end_forward();

  Controller& controller() { return controller_; }
  // Policy oracle: the windows (L, H) chosen before training, into the controller and the model.
  void set_model_windows(const std::vector<int>& windows) {
    controller_.set_model_windows(windows);
    controller_.copy_windows(model_.windows().data());
  }
  const Controller& controller() const { return controller_; }
  // Writes one JSON line per layer per control update to `path` (append when `append`).
  void open_trace(const std::string& path, bool append);
  double seconds() const { return seconds_; }  // time spent in features (or mass) + decisions so far
  // Of seconds(): time spent measuring the attention mass of policy coverage (spec section 10).
  double coverage_seconds() const { return coverage_seconds_; }
  // Data-parallel training: the batch is split in equal slices over comm's ranks. Head features and attention
  // diagnostics are then combined over the ranks (exactly, in rank order) before the controller sees them, so
  // every rank decides the same windows as one process holding the whole batch would (policy coverage: the sampled
  // sequences' masses are gathered and averaged in global sequence order).
  void set_comm(Comm* comm) { comm_ = comm; }

  // controller_state.safetensors: the controller's tensors plus "diagnostics" (3, L, H) F64.
  void save(SafetensorsWriter& w) const;
  void load(const SafetensorsReader& r);

 private:
  void measure_mass(const float* q, const float* k, int B, int T);
  void measure_copy_use(int l, const float* q, const float* k, const float* v, int B, int T);

  Model<float>& model_;
  // The controller measures attention in fp32 whatever the run's train.precision: its decisions do not follow
  // the precision of the step's products.
  const Backend<float>& measure_;
  Controller controller_;
  int L_, H_, Hkv_, D_;
  std::vector<double> diag_;      // (3, L, H): entropy, output norm, usage of the last update's attention
  std::vector<double> features_;  // (H, 9) scratch
  std::vector<double> mass_;      // (H, K) policy coverage: mass within each candidate window, sample mean
  std::vector<double> mass_seq_;  // (sampled sequences, H, K) scratch; policy copy: (B, H, K) use per sequence
  std::vector<float> per_query_;  // aah.copy_count=once: (B, H, T, K) each query's copy use (copy_use.h)
  std::vector<double> use_;       // (H, K) policy copy: copy use beyond each candidate window, mean over the batch
  Comm* comm_ = nullptr;
  std::vector<double> moments_, parts_;  // (H + 2 Hkv, 4) and (ranks, ...) scratch when comm_ has several ranks
  bool collect_ = false;                 // this forward collects diagnostics
  bool update_now_ = false;
  int step_ = 0;
  std::FILE* trace_ = nullptr;
  std::string trace_path_;
  double seconds_ = 0;
  double coverage_seconds_ = 0;
};

}  // namespace aah
