#pragma once
namespace aah {
// `aah bench decode`: a bench-c-sized model at context 4096, the paper's final Full-adaptive window mix against
// full windows: KV-cache bytes, decode tokens/s near the end of the context, prefill tokens/s.
int bench_decode(bool json);
}  // namespace aah
