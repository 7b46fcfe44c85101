// BPE of one word (bpe_merge_word in text/tokenizer_impl.h): the lowest merge rank first, leftmost among equals.
#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/check.h"
#include "text/tokenizer_impl.h"

namespace aah {

int32_t bpe_byte_token(const TokenizerImpl& t, unsigned char b) {
  const int32_t id = t.byte_id[b];
  if (id >= 0) return id;
  if (t.unk_id >= 0) return t.unk_id;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", unsigned(b));
  fail("[tokenizer] ", t.name, ": byte ", hex, " has no token in model.vocab and there is no unk_token");
}

namespace {

inline bool lookup_merge(const TokenizerImpl& t, int32_t a, int32_t b, uint32_t& rank, int32_t& merged) {
  const uint64_t* v = t.merges.find(PairMap::key(uint32_t(a), uint32_t(b)));
  if (!v) return false;
  rank = uint32_t(*v >> 32);
  merged = int32_t(uint32_t(*v));
  return true;
}

void bpe_merge_small(const TokenizerImpl& t, std::string_view w, std::vector<int32_t>& out) {
  constexpr uint32_t kNone = ~0u;
  const size_t n = w.size();
  int32_t sym[64 + 1];
  uint32_t rank[64 + 1];
  int32_t nid[64 + 1];
  for (size_t i = 0; i < n; i++) sym[i] = bpe_byte_token(t, static_cast<unsigned char>(w[i]));
  auto pair_at = [&](size_t i) {
    if (!lookup_merge(t, sym[i], sym[i + 1], rank[i], nid[i])) rank[i] = kNone;
  };
  size_t m = n;
  for (size_t i = 0; i + 1 < m; i++) pair_at(i);
  while (m > 1) {
    uint32_t best = kNone;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < m; i++)
      if (rank[i] < best) {
        best = rank[i];
        bi = i;
      }
    if (best == kNone) break;
    sym[bi] = nid[bi];
    // Remove symbol bi+1: symbols after it and the pairs after pair bi shift down by one.
    for (size_t i = bi + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
    for (size_t i = bi + 1; i + 2 < m; i++) {
      rank[i] = rank[i + 1];
      nid[i] = nid[i + 1];
    }
    m--;
    if (bi > 0) pair_at(bi - 1);
    if (bi + 1 < m) pair_at(bi);
  }
  out.insert(out.end(), sym, sym + m);
}

void bpe_merge_heap(const TokenizerImpl& t, std::string_view w, std::vector<int32_t>& out) {
  const size_t n = w.size();
  struct Sym {
    int32_t id, prev, next;
  };
  struct Entry {
    uint32_t rank;
    int32_t pos, left, right, merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> s(n);
  for (size_t i = 0; i < n; i++)
    s[i] = {bpe_byte_token(t, static_cast<unsigned char>(w[i])), int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1};
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> q;
  auto push = [&](int32_t pos) {
    const int32_t nx = s[size_t(pos)].next;
    if (nx < 0) return;
    uint32_t r;
    int32_t merged;
    if (lookup_merge(t, s[size_t(pos)].id, s[size_t(nx)].id, r, merged))
      q.push({r, pos, s[size_t(pos)].id, s[size_t(nx)].id, merged});
  };
  for (size_t i = 0; i + 1 < n; i++) push(int32_t(i));
  while (!q.empty()) {
    const Entry e = q.top();
    q.pop();
    Sym& a = s[size_t(e.pos)];
    if (a.id != e.left || a.next < 0 || s[size_t(a.next)].id != e.right) continue;  // stale
    Sym& b = s[size_t(a.next)];
    a.id = e.merged;
    a.next = b.next;
    if (b.next >= 0) s[size_t(b.next)].prev = e.pos;
    b.id = -1;
    b.next = -1;
    if (a.prev >= 0) push(a.prev);
    push(e.pos);
  }
  for (int32_t i = 0; i >= 0; i = s[size_t(i)].next) out.push_back(s[size_t(i)].id);
}

}  // namespace

void bpe_merge_word(const TokenizerImpl& t, std::string_view word, std::vector<int32_t>& out, size_t heap_threshold) {
  if (word.empty()) return;
  if (word.size() <= std::min<size_t>(heap_threshold, 64))
    bpe_merge_small(t, word, out);
  else
    bpe_merge_heap(t, word, out);
}

}  // namespace aah
