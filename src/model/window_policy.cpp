#include "model/window_policy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "controller/copy_use.h"
#include "controller/coverage.h"
#include "core/check.h"
#include "core/sys.h"
#include "dist/comm.h"
#include "formats/safetensors.h"

namespace aah {

WindowPolicyRunner::WindowPolicyRunner(const Config& cfg, Model<float>& model)
    : model_(model),
      measure_(backend_named(cfg.aah.attention)),
      controller_(controller_config_of(cfg), cfg.model.num_hidden_layers, cfg.model.num_attention_heads),
      L_(cfg.model.num_hidden_layers),
      H_(cfg.model.num_attention_heads),
      Hkv_(cfg.model.num_key_value_heads),
      D_(cfg.model.head_dim),
      diag_(size_t(3) * L_ * H_, 0.0),
      features_(size_t(H_) * kControllerFeatures) {
  controller_.copy_windows(model_.windows().data());
  model_.before_attention = [this](int l, const float* q, const float* k, const float* v, int B, int T, int* win) {
    if (!update_now_) return;
    const double t0 = now_seconds();
    ControlInput input;
    if (controller_.needs_features()) {
      const double *ent = diag_.data() + size_t(l) * H_, *onorm = diag_.data() + size_t(L_ + l) * H_,
                   *usage = diag_.data() + size_t(2 * L_ + l) * H_;
      if (comm_ && comm_->size() > 1) {  // this rank's slice: combine the slices' moments, in rank order
        const int heads = H_ + 2 * Hkv_;
        moments_.resize(size_t(heads) * kMomentStats);
        parts_.resize(moments_.size() * comm_->size());
        controller_head_moments(moments_.data(), q, k, v, B, H_, Hkv_, T, D_);
        comm_->allgather(moments_.data(), moments_.size(), parts_.data());
        controller_moments_combine(moments_.data(), parts_.data(), comm_->size(), heads);
        controller_features_from_moments(features_.data(), moments_.data(), H_, Hkv_, ent, onorm, usage);
      } else {
        controller_head_features(features_.data(), q, k, v, B, H_, Hkv_, T, D_, ent, onorm, usage);
      }
      input.features = features_.data();
    }
    if (controller_.needs_mass()) {
      measure_mass(q, k, B, T);
      input.mass = mass_.data();
    }
    if (controller_.needs_copy_use()) {
      measure_copy_use(l, q, k, v, B, T);
      input.use = use_.data();
    }
    nlohmann::json tr;
    const std::vector<int>& w = controller_.update(l, input, step_, trace_ ? &tr : nullptr);
    std::copy(w.begin(), w.end(), win);
    if (trace_) {  // every line checked: a full disk or a file-size limit is an error, not a short trace
      const std::string line = tr.dump() + "\n";
      if (std::fwrite(line.data(), 1, line.size(), trace_) != line.size() || std::fflush(trace_) != 0)
        fail("[trace] ", trace_path_, ": write failed: ", std::strerror(errno),
             errno == EFBIG ? " (a file-size limit: ulimit -f)" : errno == ENOSPC ? " (the disk is full)" : "");
    }
    seconds_ += now_seconds() - t0;
  };
}

WindowPolicyRunner::~WindowPolicyRunner() {
  model_.before_attention = nullptr;
  if (trace_) std::fclose(trace_);
}

// Policy coverage (spec section 10): the attention mass within each candidate window, at full window, on the first
// aah.coverage_sample sequences of the (global) batch, into mass_ (H, K).
void WindowPolicyRunner::measure_mass(const float* q, const float* k, int B, int T) {
  const double t0 = now_seconds();
  const std::vector<int>& w = controller_.config().windows;
  const int K = int(w.size()), ranks = comm_ ? comm_->size() : 1, rank = comm_ ? comm_->rank() : 0;
  const size_t row = size_t(H_) * K;
  // The global batch is the ranks' equal slices in rank order: this rank holds sequences rank*B .. rank*B + B-1.
  const int n = std::min(controller_.config().coverage_sample, B * ranks);
  const int per_rank = std::min(n, B), mine = std::clamp(n - rank * B, 0, B);
  mass_seq_.assign(size_t(per_rank) * row, 0.0);
  coverage_window_mass(measure_, mass_seq_.data(), q, k, mine, H_, Hkv_, T, D_, w.data(), K,
                       controller_.config().coverage_tail);
  if (ranks > 1) {  // gather the sampled sequences' rows, then keep them in global sequence order
    parts_.resize(mass_seq_.size() * ranks);
    comm_->allgather(mass_seq_.data(), mass_seq_.size(), parts_.data());
    mass_seq_.clear();
    for (int r = 0; r < ranks; r++) {
      const int count = std::clamp(n - r * B, 0, B);
      const double* p = parts_.data() + size_t(r) * per_rank * row;
      mass_seq_.insert(mass_seq_.end(), p, p + size_t(count) * row);
    }
  }
  mass_.resize(row);
  coverage_mass_mean(mass_.data(), mass_seq_.data(), n, H_, K);
  coverage_seconds_ += now_seconds() - t0;
}

// Policy copy (copy_use.h): the copy use beyond each candidate window, at full window, on every sequence of the
// batch, into use_ (H, K) as the mean over the sequences (summed in sequence order). Its time counts as the mass's.
void WindowPolicyRunner::measure_copy_use(int l, const float* q, const float* k, const float* v, int B, int T) {
  const double t0 = now_seconds();
  if (comm_ && comm_->size() > 1) fail("[copy] policy copy does not run data-parallel yet (one process only)");
  const std::vector<int>& w = controller_.config().windows;
  const int K = int(w.size());
  mass_seq_.assign(size_t(B) * H_ * K, 0.0);
  if (controller_.config().use_statistic == UseStatistic::output) {
    output_change(measure_, mass_seq_.data(), q, k, v, B, H_, Hkv_, T, D_, w.data(), K);
  } else {
    AAH_CHECK(model_.forward_tokens != nullptr, "[copy] the forward's tokens are not available");
    const bool queries = controller_.needs_copy_queries();  // aah.copy_count=once: each query's use too
    if (queries) per_query_.resize(size_t(B) * H_ * T * K);
    copy_use(measure_, mass_seq_.data(), q, k, model_.forward_tokens, B, H_, Hkv_, T, D_, w.data(), K,
             queries ? per_query_.data() : nullptr);
    if (queries) controller_.add_copy_queries(l, per_query_.data(), B, T);
  }
  use_.resize(size_t(H_) * K);
  coverage_mass_mean(use_.data(), mass_seq_.data(), B, H_, K);
  coverage_seconds_ += now_seconds() - t0;
}

void WindowPolicyRunner::open_trace(const std::string& path, bool append) {
  trace_path_ = path;
  trace_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!trace_) fail("[trace] cannot open ", path, " for writing");
}

void WindowPolicyRunner::begin_forward(int step, bool update) {
  update_now_ = update && controller_.is_update_step(step);
  step_ = step;
  // The attention collects diagnostics only on update steps (features 6-8 of the next update). Each layer's
  // previous values are read by the hook before its attention overwrites them, so one buffer serves both.
  const bool collect = update_now_ && controller_.needs_features();
  collect_ = collect;
  model_.diag_entropy = collect ? diag_.data() : nullptr;
  model_.diag_out_norm = collect ? diag_.data() + size_t(L_) * H_ : nullptr;
  model_.diag_usage = collect ? diag_.data() + size_t(2 * L_) * H_ : nullptr;
}

void WindowPolicyRunner::end_forward() {
  if (collect_ && comm_ && comm_->size() > 1) {
    // The diagnostics just collected are means over this rank's slice; equal slices: their mean over ranks (summed
    // in rank order, the same on every rank) is the mean over the whole batch.
    const int n = comm_->size();
    parts_.resize(diag_.size() * n);
    comm_->allgather(diag_.data(), diag_.size(), parts_.data());
    for (size_t i = 0; i < diag_.size(); i++) {
      double s = 0;
      for (int r = 0; r < n; r++) s += parts_[size_t(r) * diag_.size() + i];
      diag_[i] = s / n;
    }
  }
  collect_ = false;
  update_now_ = false;
  model_.diag_entropy = model_.diag_out_norm = model_.diag_usage = nullptr;
  if (trace_) std::fflush(trace_);
}

void WindowPolicyRunner::save(SafetensorsWriter& w) const {
  controller_.save(w);
  w.add_raw("diagnostics", "F64", diag_.data(), diag_.size() * sizeof(double), {3, int64_t(L_) * H_});
}

void WindowPolicyRunner::load(const SafetensorsReader& r) {
  controller_.load(r);
  r.read_raw("diagnostics", "F64", diag_.data(), {3, int64_t(L_) * H_});
  controller_.copy_windows(model_.windows().data());
}

}  // namespace aah
