"""Extract InferenceX's Dynamo disaggregated DeepSeek-R1 and gpt-oss recipes (B200 / H200 / H100 / B300 / GB200 / GB300) from the
history of .github/configs/nvidia-master.yaml (github.com/SemiAnalysisAI/InferenceX) into
framework/data/validation/inferencex_disagg.yaml: one entry per recipe and validity window.
Run from the repository root with $INFERENCEX naming a clone's git directory."""

import os
import re
import subprocess
import sys

import yaml

REPO = os.environ.get("INFERENCEX", "InferenceX/.git")  # a clone of github.com/SemiAnalysisAI/InferenceX
PATH = ".github/configs/nvidia-master.yaml"
KEY = re.compile(r"^(dsr1|gptoss)-(fp4|fp8)-(b200|h200|h100|b300|gb200|gb300)-dynamo-(trt|sglang)(-mtp)?$")
# the config key's runner -> AIConfigurator's system name (its silicon rows' `system`)
SYSTEM = {
    "b200": "b200_sxm",
    "h200": "h200_sxm",
    "h100": "h100_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
}
BATCH = re.compile(r"batch(\d+)")


def git(*a):
    return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, check=True).stdout


def pool(p):
    """One worker's pool; `tp` = its GPUs, as every key but one writes it. The GB200 SGLang keys of 2026-01 / 02 write a
    DEP-N (or TEP-N) pool as tp 1, ep N (their search-space comments: "1 prefill worker at DEP4 and 2 decode workers at
    DEP4"): a pool's GPUs are max(tp, ep)."""
    return {
        "workers": int(p["num-worker"]),
        "tp": max(int(p["tp"]), int(p["ep"])),
        "ep": int(p["ep"]),
        "dp_attn": bool(p["dp-attn"]),
    }


def recipes(sha):
    cfg = yaml.safe_load(git("show", f"{sha}:{PATH}")) or {}
    out = []
    for key, v in cfg.items():
        m = KEY.match(key)
        if not m:
            continue
        for seq in v.get("seq-len-configs") or []:
            for s in seq.get("search-space") or []:
                files = [
                    x.split("=", 1)[1]
                    for x in (s["prefill"].get("additional-settings") or [])
                    if "CONFIG_FILE=" in x
                ]
                f = files[0] if files else ""
                b = BATCH.search(f.rsplit("/", 1)[-1])
                mtp = s.get("spec-decoding", "none") not in ("none", None) or bool(m.group(5))
                out.append(
                    {
                        "key": key,
                        "model": m.group(1),
                        "image": v["image"],
                        "precision": m.group(2),
                        "system": SYSTEM[m.group(3)],
                        "backend": "trtllm" if m.group(4) == "trt" else "sglang",
                        "isl": int(seq["isl"]),
                        "osl": int(seq["osl"]),
                        "mtp": mtp,
                        "conc": sorted(int(c) for c in s["conc-list"]),
                        "prefill": pool(s["prefill"]),
                        "decode": {**pool(s["decode"]), "batch": int(b.group(1)) if b else 0},
                        "config_file": f,
                    }
                )
    return out


def utc(when):
    import datetime as dt

    if not when:
        return ""
    return dt.datetime.fromisoformat(when).astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


HEADER = open(__file__.replace(".py", "_header.txt")).read()


def main(
    since="2026-01-20", until="2026-04-07"
):  # to the day after the newest dump (source_file=2026-04-06.csv)
    log = git(
        "log", "--reverse", "--format=%H %cI", f"--since={since}", f"--until={until}", "--", PATH
    ).split("\n")
    commits = [line.split() for line in log if line.strip()]
    prev = git("log", "-1", "--format=%H %cI", f"--before={since}", "--", PATH).split()
    commits = [prev] + commits
    live = {}  # recipe (as yaml text) -> entry with window
    done = []
    for sha, when in commits:
        now = {yaml.safe_dump(r, sort_keys=True): r for r in recipes(sha)}
        for k in list(live):
            if k not in now:
                live[k]["until"] = when
                done.append(live.pop(k))
        for k, r in now.items():
            if k not in live:
                live[k] = {**r, "commit": sha[:9], "since": when, "until": ""}
    done += live.values()
    for e in done:
        for k in ("since", "until"):
            e[k] = utc(e[k])
    done.sort(key=lambda e: (e["key"], e["since"], e["isl"], e["osl"], e["conc"]))
    sys.stdout.write(HEADER)
    for e in done:
        sys.stdout.write(
            "- " + yaml.safe_dump(e, sort_keys=False, width=10000, default_flow_style=True).strip() + "\n"
        )


if __name__ == "__main__":
    main()
