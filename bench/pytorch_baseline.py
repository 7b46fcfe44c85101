#!/usr/bin/env python3
"""PyTorch baseline for `aah bench train`: the same bench-c model (Qwen3-style: RMSNorm, QK-norm, RoPE, causal
attention, SwiGLU, tied embeddings), AdamW, vocab 8192, 4096 tokens per step (batch 4096 / context, at least 1),
timed the same way (median step after a warm-up). Debian's python3-torch (1.13) has no fused attention, so
attention is the usual dense masked softmax: T x T scores per head.

  /usr/bin/python3 bench/pytorch_baseline.py [--threads 2] [--steps 5] [--context 1024] [--windows full|mix]
                                             [--precision fp32|bf16] [--max-gb 20] [--json]
--precision bf16: the step under torch.autocast("cpu", dtype=torch.bfloat16) (bf16 products, fp32 master weights
and optimizer), PyTorch's mixed precision, beside `aah bench train --precision fp32,bf16`.
--windows mix: per-head windows as the paper ran them, a dense (H, T, T) additive mask (the paper's final
Full-adaptive mix: 4 x T/8, 2 x T/4, T/2, T per layer, as `aah bench train --windows mix`); the work is that of
full attention whatever the windows. --max-gb caps the address space: a context that does not fit fails with
"fits": false and the allocation that failed, instead of swapping or waking the OOM killer.
Not run by CI (PyTorch is not a dependency of aah); docs/results-training.md and docs/long-context.md quote its figures next to aah's
(bench/long_context.sh runs both side by side).
"""
import argparse, json, math, resource, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

C, L, H, D, FF, V = 256, 4, 8, 32, 704, 8192
B, T = 4, 1024  # set from --context in main()


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q, self.k, self.v = (nn.Linear(C, H * D, bias=False) for _ in range(3))
        self.o = nn.Linear(H * D, C, bias=False)
        self.qn, self.kn = RMSNorm(D), RMSNorm(D)
        self.gate, self.up = nn.Linear(C, FF, bias=False), nn.Linear(C, FF, bias=False)
        self.down = nn.Linear(FF, C, bias=False)

    def forward(self, x, cos, sin, mask):
        h = self.ln1(x)
        q = self.qn(self.q(h).view(B, T, H, D)).transpose(1, 2)
        k = self.kn(self.k(h).view(B, T, H, D)).transpose(1, 2)
        v = self.v(h).view(B, T, H, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
        x = x + self.o(y)
        return x + self.down(F.silu(self.gate(self.ln2(x))) * self.up(self.ln2(x)))


def paper_mix(t):
    return [t // 8] * 4 + [t // 4] * 2 + [t // 2, t]


def causal_mask(windows):
    """Additive mask: (T, T) plain causal, or (H, T, T) with head h seeing keys [i - W_h + 1, i]."""
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    if windows is None:
        return torch.zeros(T, T).masked_fill(j > i, float("-inf"))
    w = torch.tensor(windows).view(H, 1, 1)
    return torch.zeros(H, T, T).masked_fill((j > i) | (i - j >= w), float("-inf"))


class Model(nn.Module):
    def __init__(self, windows=None):
        super().__init__()
        self.embed = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = RMSNorm(C)
        inv = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
        ang = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((ang, ang), -1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        self.register_buffer("mask", causal_mask(windows))

    def forward(self, idx, tgt):
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        logits = self.norm(x) @ self.embed.weight.t()
        return F.cross_entropy(logits.view(-1, V), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--windows", choices=["full", "mix"], default="full")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--max-gb", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    global B, T
    T, B = a.context, max(1, 4096 // a.context)
    cap = int(a.max_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    row = {"config": "bench-c", "impl": f"pytorch {torch.__version__}", "threads": a.threads, "context": T,
           "batch": B, "windows": a.windows, "precision": a.precision}
    try:
        row.update(run(a))
        row["fits"] = True
    except (RuntimeError, MemoryError) as e:
        row.update({"fits": False, "max_gb": a.max_gb, "error": str(e).splitlines()[0][:300]})
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(row) if a.json else "\n".join(f"  {k:14s} {v}" for k, v in row.items()))


def run(a):
    model = Model(paper_mix(T) if a.windows == "mix" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    idx = torch.randint(0, V, (B, T + 1))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    return {"tokens_per_s": B * T / sec, "ms_per_step": sec * 1e3, "steps_timed": len(times),
            "ms_min": min(times) * 1e3, "ms_max": max(times) * 1e3}


if __name__ == "__main__":
    main()
