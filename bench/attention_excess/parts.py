"""Splits `perf report --sort sym --stdio` (stdin) of bench/attention_excess/driver by kernel copy and by part.

Arguments: the driver's last line ("pairs run: small N full M"), T, W and the pass (f or b). Prints per part
the small window's time per pair over full windows' (namespace aahx over aahy), and its excess in percent of full's
time per pair. The backward's driver runs one forward first (for O and lse): forward-only symbols are left out.
"""
import re
import sys

m = re.search(r"small ([\d.e+]+) full ([\d.e+]+)", sys.argv[1])
pairs = {"aahx": float(m.group(1)), "aahy": float(m.group(2))}
T, W, backward = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "b"

LOG = "log of the forward's lse (per row)"
PARTS = [  # (part, test on the symbol); the first match wins
    ("transposes of Q, dO (per row)", lambda s: "transpose" in s),
    ("Delta = rowsum(dO * O) (per row)", lambda s: "delta_rows" in s),
    ("softmax pass", lambda s: "softmax_tile" in s),
    ("dS pass (boundary tiles, AVX2 builds)", lambda s: "bwd_ds_tile" in s),
    # tile_gemm mode 0 (kSet): the score products S^T, dP^T with their epilogues; 1-3: the output products
    ("score products + epilogues", lambda s: re.search(r"tile_gemm\w*<(\w+::cpu::Vec\d+, \d+, \d+, )?0,", s)),
    ("output products (PV, dV, dK, dQ)", lambda s: re.search(r"tile_gemm\w*<(\w+::cpu::Vec\d+, \d+, \d+, )?[123],", s)),
    # what the compiler inlined into the forward's task: the PV product and the normalisation (AVX-512 builds),
    # also the softmax and the score products (AVX2 builds)
    ("forward task, inlined parts", lambda s: "attn_forward_task" in s or "attn_local_forward" in s),
]
share, log = {}, 0.0
for line in sys.stdin:
    hit = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(.*)", line)
    if not hit:
        continue
    pct, sym = float(hit.group(1)), hit.group(2)
    # the forward-only symbols: the softmax, the log, the forward's task, its score and PV (mode 2, kScaleAdd) products
    forward_only = "logf" in sym or "softmax" in sym or "forward" in sym or "ColMax" in sym or re.search(
        r"tile_gemm\w*<(\w+::cpu::Vec\d+, \d+, \d+, )?2,", sym)
    if backward and forward_only:
        continue
    if "logf" in sym:  # libm, called by both copies once per query row
        log += pct
        continue
    side = next((ns for ns in pairs if sym.startswith(ns + "::")), None)
    if side is None:
        continue  # the driver's own set-up
    part = next((name for name, test in PARTS if test(sym)), "other")
    share[(side, part)] = share.get((side, part), 0.0) + pct
if log:  # split by the query rows each side ran: its pairs over its mean visible pairs per row
    rows = {"aahx": pairs["aahx"] / (W - W * (W - 1) / (2 * T)), "aahy": pairs["aahy"] / ((T + 1) / 2)}
    for side in rows:
        share[(side, LOG)] = log * rows[side] / sum(rows.values())
per_pair = {key: value / pairs[key[0]] for key, value in share.items()}
full = sum(v for (side, _), v in per_pair.items() if side == "aahy")
small = sum(v for (side, _), v in per_pair.items() if side == "aahx")
print(f"  {'part':42s} {'W / full, per pair':>18s} {'excess':>8s}")
for name in [p for p, _ in PARTS] + [LOG, "other"]:
    x, a = per_pair.get(("aahx", name), 0.0), per_pair.get(("aahy", name), 0.0)
    if x or a:
        print(f"  {name:42s} {(f'{x / a:.2f}x' if a else '-'):>18s} {100 * (x - a) / full:+7.1f}%")
print(f"  {'total (t/p from the samples)':42s} {small / full:17.3f}x")
