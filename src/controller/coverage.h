// The need-aware window policy (spec section 10, added here, not in the paper): on control updates, measure how much
// of each head's attention falls within each candidate window, at full window, and give every head the smallest
// window that holds aah.coverage of it (or, with aah.pair_budget, the windows of most mass within a pair budget).
//
// S sampled sequences, H query heads, Hkv key/value heads (H % Hkv == 0), T positions, D head dim, K candidate
// windows W_0 < ... < W_{K-1}.
#pragma once
#include <vector>

#include "kernels/backend.h"

namespace aah {

// mass (S, H, K): row (s, h) holds m_h(W_k) of sequence s = mean over the T queries i of sum over keys j <= i with
// i - j < W_k of p_ij, where p_i is the causal softmax(q_i k^T / sqrt(D)) row at FULL window (every key j <= i),
// whatever window the head executes. q (S, H, T, D) and k (S, Hkv, T, D) are the tensors attention uses (after
// q/k norm and RoPE): the first S sequences of a (B, ., T, D) batch are its first S * . * T * D values. Head h reads
// KV head h / (H / Hkv). Scores by sgemm in float, exponentials by the attention kernel's vexp, sums in double;
// m_h(W) = 1 exactly where W covers every key (W >= T). Threads split the (s, h) rows; each row's result does not
// depend on the thread count. Cost: the Q K^T products of full causal attention for S sequences, no P V.
// tail < 1 (aah.coverage_tail): m_h(W_k) is instead the mean over the ceil(tail T) queries with the least mass in
// W_k (each query's own m_i(W_k) = sum of its p_ij there; summed in ascending order), so that a few queries that
// reach far (a retrieval head's questions) count even where the mean over all queries is near 1. Still 1 exactly
// where W covers every key, and non-decreasing in W.
void coverage_window_mass(const Backend<float>& be, double* mass, const float* q, const float* k, int S, int H, int Hkv,
                          int T, int D, const int* windows, int K, double tail = 1.0);

// sum of e[lo .. hi) in double, in a fixed order (the compiler's simd reduction, the same every call; shared too).
double coverage_range_sum(const float* e, int lo, int hi);

// out (H, K) = mean over s of per_seq (S, H, K), summed in sequence order (the same bits whoever computed the rows).
void coverage_mass_mean(double* out, const double* per_seq, int S, int H, int K);

// The decision for one head: the smallest k with mass[k] >= coverage; K-1 when none (mass (K)).
int coverage_choice(const double* mass, int K, double coverage);

// Budget variant, for one layer: indices c (H) maximising total covered mass sum_h mass[h][c_h] subject to the exact
// pair ratio sum_h pairs(T, W_{c_h}) / (H pairs(T, T)) <= budget, T = W_{K-1}, greedily: start every head at 0, then
// repeatedly take the move of one head from c_h to any k > c_h with the largest mass gained per pair added that gains
// mass and still fits (ties: lowest head, then lowest k). A budget below every head at W_0 leaves them there.
std::vector<int> coverage_budget_choice(const double* mass, int H, const std::vector<int>& windows, double budget);

}  // namespace aah
