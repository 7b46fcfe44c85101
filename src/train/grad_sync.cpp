#include "train/grad_sync.h"

#include <algorithm>
#include <string>

#include "core/sys.h"

namespace aah {

GradSync::GradSync(Comm& comm, Model<float>& model, bool overlap)
    : comm_(comm), model_(model), overlap_(overlap && comm.size() > 1) {
  AAH_CHECK(comm.size() <= 1 || model.backend->memory.host, "[train] backend ", model.backend->name,
            ": the all-reduce (MPI) reads the gradients on the host");
  const int L = model.config().num_hidden_layers;
  buckets_.resize(size_t(L) + 2);
  for (const ParamTensor& t : model.tensors()) {
    int b = L;  // model.norm, lm_head
    if (t.name.rfind("model.layers.", 0) == 0)
      b = std::stoi(t.name.substr(13));
    else if (t.name == "model.embed_tokens.weight")
      b = L + 1;
    buckets_[size_t(b)].push_back({t.offset, t.numel});
  }
  for (Ranges& r : buckets_) {  // adjacent slices travel as one
    std::sort(r.begin(), r.end());
    Ranges merged;
    for (auto x : r) {
      if (!merged.empty() && merged.back().first + merged.back().second == x.first)
        merged.back().second += x.second;
      else
        merged.push_back(x);
    }
    r = merged;
  }
  if (overlap_)
    model_.after_layer_backward = [this](int l) {
      if (!armed_) return;
      send(buckets_[size_t(l < 0 ? int(buckets_.size()) - 1 : l)]);
    };
}

GradSync::~GradSync() {
  if (overlap_) model_.after_layer_backward = nullptr;
}

void GradSync::before_backward(bool last) { armed_ = last; }

void GradSync::send(const Ranges& r) {
  const double t0 = now_seconds();
  for (auto [off, n] : r) comm_.iallreduce_sum(model_.grads_data() + off, n);
  seconds_ += now_seconds() - t0;
}

void GradSync::finish() {
  if (comm_.size() <= 1) return;
  const double t0 = now_seconds();
  if (overlap_)
    comm_.wait_all();
  else
    comm_.allreduce_sum(model_.grads_data(), model_.num_params());
  armed_ = false;
  seconds_ += now_seconds() - t0;
}

}  // namespace aah
