#!/usr/bin/env python3
"""Combines the golden runs' values from several arithmetics into tests/golden/values.json (scripts/golden_values.sh).

The first file is the reference. For each kind of value (loss, val_loss, pair_ratio, eval_val_loss, logprob) the
tolerance is FACTOR times the largest deviation from the reference seen across the files, and at least the floor:
a correct build on a CPU nobody recorded computes one more arithmetic of the same kind. Window maps and sampled
tokens are discrete: they must agree in every file, and the check compares them exactly.
"""
import json
import sys

FACTOR = 4.0
FLOOR = {"loss": 2e-5, "val_loss": 2e-5, "eval_val_loss": 2e-5, "pair_ratio": 1e-9, "logprob": 2e-4}
EXACT = {"window_map", "tokens"}


def main(out, files):
    runs = [json.load(open(f)) for f in files]
    ref = runs[0]["values"]
    dev = {k: 0.0 for k in FLOOR}
    for r in runs[1:]:
        v = r["values"]
        if set(v) != set(ref):
            sys.exit(f"{r['key']}: other runs than the reference's ({sorted(set(v) ^ set(ref))})")
        for name, quantities in ref.items():
            for q, a in quantities.items():
                b = v[name][q]
                if q in EXACT:
                    if a != b:
                        sys.exit(f"{r['key']}: {name}/{q} differs from the reference: {b} vs {a}; "
                                 "the cross-machine check cannot compare it exactly")
                    continue
                pairs = zip(a, b) if isinstance(a, list) else [(a, b)]
                for x, y in pairs:
                    dev[q] = max(dev[q], abs(x - y))
    tol = {q: max(FACTOR * d, FLOOR[q]) for q, d in dev.items()}
    doc = {
        "what": "the golden runs' values (tests/test_golden.cpp) and the cross-machine tolerances: "
                f"{FACTOR} x the largest deviation from the reference across the arithmetics listed, at least a floor",
        "reference": runs[0]["key"],
        "arithmetics": [r["key"] for r in runs],
        "max_deviation": dev,
        "tolerance": tol,
        "values": ref,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for q in FLOOR:
        print(f"{q:14s} max deviation {dev[q]:.3g}  tolerance {tol[q]:.3g}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: golden_values.py OUT.json VALUES.json...")
    main(sys.argv[1], sys.argv[2:])
