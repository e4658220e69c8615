"""Property-based inputs through the command line, not only the evaluator: hypothesis draws
override values, user YAML field values and trace CSV rows, and each goes through the real entry
point (decodelab.apps.cli.main, in this process; YAML and CSV loading, Hydra, checks, files).

For every drawn input exactly one of:
- exit 0 and a result.json whose status is ok or infeasible (an infeasible one with its reason);
- exit 2 with exactly one `error:` line on stderr naming the field or the file, and nothing
  recorded as ok;
never a traceback. Few examples (the time budget of the default run); DECODELAB_NIGHTLY=1 draws
more."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import CONF, run_in_process
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow  # every test here launches the command or a sweep

EXAMPLES = 400 if os.environ.get("DECODELAB_NIGHTLY") else 8
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same inputs every run: CI never goes red on a new draw
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example is a run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# values a user may type: valid and invalid numbers, words, YAML-looking text
VALUES = st.one_of(
    st.integers(min_value=-5, max_value=5000),
    st.sampled_from(["0", "-1", "1e12", "2.5", "nan", "inf", "-inf", "abc", "true", "null", "[1,2]", "''"]),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=1e5).map(lambda f: f"{f:g}"),
)
FIELDS = [
    "workload.batch_size",
    "workload.prompt_len",
    "workload.output_len",
    "hardware.tensor_parallel",
    "kv_policy.budget",
    "optimizations.schedule_offloading",
    "optimizations.kernel_looping",
    "workload.weight_dtype",
]


def outcome(cwd: Path, argv, names) -> None:
    """Run argv (the Hydra app, tracking off, its run dir under cwd) and check the contract."""
    run_dir = cwd / uuid.uuid4().hex[:12]
    code, out, err = run_in_process(cwd, [*argv, "tracking=off", "quiet=true", f"hydra.run.dir={run_dir}"])
    text = f"argv {argv}\nexit {code}\n--- stdout\n{out[-1500:]}\n--- stderr\n{err[-1500:]}"
    assert "Traceback" not in out + err, text
    result = run_dir / "result.json"
    if code == 0:
        rec = json.loads(result.read_text())
        assert rec["status"] in ("ok", "infeasible"), text
        assert rec["status"] == "ok" or rec["reason"], text
    else:
        assert code == 2, text
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1, text
        assert any(n in lines[0] for n in names), text
        assert not result.exists() or json.loads(result.read_text())["status"] != "ok", text


@pytest.mark.slow
@SETTINGS
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_drawn_override_is_a_result_or_one_error_line(tmp_path, field, value):
    outcome(tmp_path, ["model=llama3_2_1b", "workload.output_len=16", f"{field}={value}"], [field])


MODEL_FIELDS = [
    "n_layers",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "head_dim",
    "ffn_dim",
    "vocab_size",
    "max_context",
]


@pytest.mark.slow
@SETTINGS
@given(
    field=st.sampled_from(MODEL_FIELDS),
    value=st.one_of(
        st.integers(min_value=-3, max_value=300000), st.text(max_size=6), st.booleans(), st.none()
    ),
)
@example(field="n_layers", value="\x85")  # found by this test: a line break in the error line
def test_drawn_user_yaml_is_a_result_or_one_error_line(tmp_path, field, value):
    """A user's model YAML (the Llama-3.2-1B shape) with one drawn field value."""
    base = yaml.safe_load((CONF / "model" / "llama3_2_1b.yaml").read_text())
    base.update(name="fuzz", **{field: value})
    conf = tmp_path / "uc" / uuid.uuid4().hex[:8]
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "fuzz.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    outcome(
        tmp_path,
        [f"hydra.searchpath=[file://{conf}]", "model=fuzz", "workload.output_len=16"],
        [f"model.{field}", "fuzz.yaml"],
    )


ROW = st.tuples(
    st.one_of(st.floats(min_value=-2, max_value=5, allow_nan=False).map(lambda f: f"{f:g}"), st.just("x")),
    st.one_of(st.integers(min_value=-2, max_value=600).map(str), st.just("1.5"), st.just("")),
    st.one_of(st.integers(min_value=-2, max_value=40).map(str), st.just("many")),
)


@pytest.mark.slow
@SETTINGS
@given(rows=st.lists(ROW, min_size=0, max_size=4))
def test_drawn_trace_csv_is_a_result_or_one_error_line(tmp_path, rows):
    """A request trace (arrival_s, prompt_len, output_len) with drawn rows, served by a small
    model."""
    csv = tmp_path / f"{uuid.uuid4().hex[:8]}.csv"
    csv.write_text("arrival_s,prompt_len,output_len\n" + "".join(",".join(r) + "\n" for r in rows))
    outcome(tmp_path, ["model=llama3_2_1b", "workload=trace", f"workload.trace={csv}"], [csv.name])
