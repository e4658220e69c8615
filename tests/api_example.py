"""The README's Python API example, run by .ci/run against the installed wheel."""

import decodelab

r = decodelab.evaluate("model=llama3_1_70b", "hardware=dgx_h100", "workload.batch_size=8", "tracking=off")
print(r.status, f"TPOT {r.metrics['tpot_ms']:.2f} ms")
df = decodelab.sweep("workload.batch_size=1,8", "hardware=h100_sxm,sn40l_rack16")
print(df[["hardware.name", "workload.batch_size", "status", "tpot_ms"]].to_string(index=False))
assert r.status == "ok" and len(df) == 4 and (df.status == "ok").all()
print(len(decodelab.load_results(df["dir"].iloc[0])), "result loaded back")
