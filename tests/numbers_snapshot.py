"""The numbers regression snapshot: every metric of a fixed set of designs, every claim figure and
every `decodelab validate` prediction, stored in tests/data/numbers.json. A change that is not
meant to move the model (a refactor) must leave them identical: tests/test_numbers.py compares.
A change that moves the model re-writes the file on purpose and says why in its commit:

    python tests/numbers_snapshot.py --write        # after a deliberate model change
    python tests/numbers_snapshot.py                # compare, print what moved
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

FILE = Path(__file__).resolve().parent.parent / "tests" / "data" / "numbers.json"

DESIGNS = [
    [],
    ["workload.prompt_len=4096"],
    ["model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=8"],
    ["hardware=sn40l_rack16", "optimizations=all"],
    [
        "model=deepseek_r1",
        "hardware=sn40l_rack16",
        "workload.weight_dtype=fp8",
        "kv_policy=snapstream",
        "workload.prompt_len=129024",
        "workload.output_len=2048",
        "workload.batch_fill=true",
    ],
    ["workload=closed_loop", "workload.concurrency=32"],
    ["workload=open_loop", "workload.arrival_rate=8", "engine=vllm"],
    ["workload=closed_loop", "engine=sn40l_static", "hardware=sn40l_node8"],
    ["coe=samba_coe", "hardware=sn40l_node8"],
    ["model=mixtral_8x7b", "hardware=dgx_h100", "speculative=draft"],
    ["model=gpt_oss_120b", "hardware=h100_sxm", "workload.weight_dtype=fp8", "kv_policy=quest"],
    ["model=qwen2_5_72b", "hardware=sn40l_node8", "kv_policy=h2o", "optimizations=all"],
    ["model=llama3_1_70b", "hardware=sn40l_rack16", "speculative=draft", "optimizations=all"],
    ["kv_policy=pyramidkv", "workload.batch_size=4", "workload.prompt_len=8192"],
    ["kv_policy=snapkv"],
    ["kv_policy=streaming_llm"],
]


def _clean(m):
    return {k: (None if isinstance(v, float) and math.isnan(v) else float(v)) for k, v in m.items()}


def snapshot(claim_rows=None) -> dict:
    """The current numbers (claim_rows: run_claims() rows, computed here when not given)."""
    from decodelab.api import evaluate
    from decodelab.runs.claims import run_claims
    from decodelab.runs.validation import default_csv, run_validation

    out = {"designs": [], "claims": [], "validate": []}
    for ov in DESIGNS:
        r = evaluate("tracking=off", *ov)
        out["designs"].append(
            {"overrides": ov, "status": r.status, "reason": r.reason, "metrics": _clean(r.metrics)}
        )
    for row in claim_rows if claim_rows is not None else run_claims():
        out["claims"].append(
            {
                "id": row["id"],
                "figure": row["figure"],
                "simulated": None if row["simulated"] is None else float(row["simulated"]),
                "pass": bool(row["pass"]),
            }
        )
    df = run_validation(default_csv())
    out["validate"] = [
        {"ttft_pred": float(a), "tpot_pred": float(b)} for a, b in zip(df.ttft_pred, df.tpot_pred)
    ]
    return out


def differences(old: dict, new: dict, rel: float = 1e-9) -> list:
    """Lines naming every number that moved (beyond `rel`), appeared or went away."""
    diffs = []

    def close(a, b):
        if a is None or b is None:
            return a is b
        return a == b or abs(a - b) <= rel * max(abs(a), abs(b))

    for o, n in zip(old["designs"], new["designs"]):
        label = " ".join(o["overrides"]) or "(default)"
        if (o["status"], o["reason"]) != (n["status"], n["reason"]):
            diffs.append(f"design {label}: {o['status']} {o['reason']!r} -> {n['status']} {n['reason']!r}")
        for k in sorted(set(o["metrics"]) | set(n["metrics"])):
            a, b = o["metrics"].get(k), n["metrics"].get(k)
            if not close(a, b):
                diffs.append(f"design {label}: {k} {a} -> {b}")
    for o, n in zip(old["claims"], new["claims"]):
        if (o["id"], o["figure"]) != (n["id"], n["figure"]) or not close(o["simulated"], n["simulated"]):
            diffs.append(
                f"claim {o['id']} {o['figure']}: {o['simulated']} -> {n['id']} {n['figure']} {n['simulated']}"
            )
    for i, (o, n) in enumerate(zip(old["validate"], new["validate"])):
        for k in ("ttft_pred", "tpot_pred"):
            if not close(o[k], n[k]):
                diffs.append(f"validate row {i + 1}: {k} {o[k]} -> {n[k]}")
    for part in ("designs", "claims", "validate"):
        if len(old[part]) != len(new[part]):
            diffs.append(f"{part}: {len(old[part])} -> {len(new[part])} entries")
    return diffs


def main(argv) -> int:
    new = snapshot()
    if "--write" in argv:
        FILE.parent.mkdir(parents=True, exist_ok=True)
        FILE.write_text(json.dumps(new, indent=0, sort_keys=True) + "\n")
        print(f"wrote {FILE}")
        return 0
    diffs = differences(json.loads(FILE.read_text()), new)
    print("\n".join(diffs) or "numbers unchanged")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
