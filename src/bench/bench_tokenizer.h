#pragma once
#include "bench/measure.h"

namespace aah {
// `aah bench tokenizer [--json]`: trains a byte-level BPE (vocab 8192) on 10 MB of text and encodes the same
// 10 MB with the result, one thread, in one process. Texts: 10 MB of the Python standard library
// (/usr/lib/python3.11, Debian libpython3.11-stdlib) when installed; 10 MB of generated English-like text (Zipfian
// pseudo-words, punctuation, numbers, paragraphs); the Brown corpus when it is already in the npm cache.
// Training and encoding of every text run interleaved, round after round (measure.h); encoding starts each round
// with a fresh encoder (an empty word cache).
// Prints training seconds (word counting + merges), encoding MB/s and tokens/s, and bytes per token; one JSON
// object per line with --json. Goals on a 2-core machine: training under 60 s, encoding at 10 MB/s or more.
// Returns 0.
int bench_tokenizer(const BenchOptions& o);
}  // namespace aah
