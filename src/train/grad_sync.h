// Data-parallel gradient all-reduce: after the backward of an optimizer step's last micro-batch every rank holds
// the sum of every rank's (unscaled) gradients, so clipping and AdamW see the whole batch's gradient and the
// optimizer state stays identical on every rank.
//
// With `overlap`, gradients travel in buckets as backward finishes them (the final norm and LM head first, then
// each layer, top to bottom, then the embedding): non-blocking all-reduces started from the model's
// after_layer_backward hook, waited for in finish(). Without it, one blocking all-reduce in finish().
#pragma once
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "model/model.h"

namespace aah {

class GradSync {
 public:
  GradSync(Comm& comm, Model<float>& model, bool overlap);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call before each micro-batch's backward; `last` = the step's last micro-batch (its buckets are final).
  void before_backward(bool last);
  // After the step's backward: completes the all-reduce of every gradient.
  void finish();
  // Wall time this object spent in communication (started buckets, waits, blocking all-reduces), accumulated.
  double seconds() const { return seconds_; }

 private:
  using Ranges = std::vector<std::pair<size_t, size_t>>;  // (offset, count) in the gradient buffer
  void send(const Ranges& r);
  Comm& comm_;
  Model<float>& model_;
  bool overlap_, armed_ = false;
  std::vector<Ranges> buckets_;  // index L: final norm + LM head, 0..L-1: layers, L+1: embedding
  double seconds_ = 0;
};

}  // namespace aah
