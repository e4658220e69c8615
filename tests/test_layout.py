"""The kernels' array layouts are declared once (kernel_layout.Layout) and agree with the code: every
layout numbers its fields 0.. without gaps or overlaps, Numba reads a field as a compile-time
integer, every field is read by the kernel that consumes the array and written by its producer (a
field nobody fills or nobody reads fails here), and no jitted module keeps hand-numbered index
constants again."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
from decodelab import kernel_layout as KL
from decodelab.components.execution import dataflow, gpu
from decodelab.components.kv_policy import full
from decodelab.core import build, grid_kernel, kv_costs, parallel, pipeline
from decodelab.modes.serving import admission, engine_vector, pick
from decodelab.modes.serving import layout as SL
from numba import njit

FRAMEWORK = Path(KL.__file__).resolve().parent
MODULES = (KL, SL, admission, pick, pipeline, grid_kernel, kv_costs)
LAYOUTS = {v.__name__: v for m in MODULES for v in vars(m).values() if isinstance(v, KL.Layout)}


def source(*paths: str) -> str:
    return "\n".join((FRAMEWORK / p).read_text() for p in paths)


def fields_with_aliases(lay: KL.Layout):
    return [n for n in vars(lay) if n.isupper()]


def test_every_layout_is_found_once():
    found = [v for m in MODULES for v in vars(m).values() if isinstance(v, KL.Layout)]
    assert len({id(v) for v in found}) == len(LAYOUTS) >= 20  # one layout per name


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_fields_are_numbered_without_gaps(name):
    lay = LAYOUTS[name]
    at = [i for _, i in lay]
    assert at[0] == 0 and at == sorted(at) and len(set(at)) == len(at)
    assert len(lay) == lay.size > at[-1]
    assert all(type(i) is int for i in at)  # plain ints: numpy's and Numba's fast path
    for n in fields_with_aliases(lay):  # aliases point inside the layout
        assert 0 <= getattr(lay, n) < lay.size


def test_blocks_take_their_width():
    assert KL.Lin.size - KL.Lin.TAB == max(KL.N_MGRID, KL.N_BGRID * KL.N_CGRID)
    assert KL.Lin.W_RATIO + KL.N_MGRID <= KL.Lin.size
    assert SL.StepLog.SEQS - SL.StepLog.CAUSE == len(KL.CAUSES) == KL.Cause.size
    assert (KL.Lin.A_PAIR, KL.Lin.A_TOK, KL.Lin.A_SEQ) == (KL.Lin.G_AC, KL.Lin.G_CM, KL.Lin.G_AM)
    assert KL.CAUSES == ("memory", "compute", "launch_sync", "fill_drain", "host", "collectives", "excess")


def test_declaration_errors():
    with pytest.raises(ValueError, match="repeated"):
        KL.Layout("Bad", "A", "A")
    with pytest.raises(ValueError, match="UPPER_CASE"):
        KL.Layout("Bad", "a")
    lay = KL.Layout("Toy", "A", ("B", 3), "C")
    assert (lay.A, lay.B, lay.C, lay.size) == (0, 1, 4, 5)
    with pytest.raises(ValueError, match="taken or outside"):
        lay.alias(C=1)
    with pytest.raises(ValueError, match="taken or outside"):
        lay.alias(D=5)


def test_vector_fills_every_field_by_name():
    lay = KL.Layout("Toy", "A", ("B", 3), "C")
    v = lay.vector({"a": 1.0, "b": [2.0, 3.0, 4.0], "c": True, "ignored": 9.0})
    np.testing.assert_array_equal(v, [1.0, 2.0, 3.0, 4.0, 1.0])
    with pytest.raises(ValueError, match="Toy: no value for b, c"):
        lay.vector({"a": 1.0})
    with pytest.raises(ValueError, match="Eng: no value for max_batch"):
        SL.Eng.vector({})


def test_numba_reads_fields_as_constants():
    """A field is a compile-time integer in a jitted function: indexing, slicing, sizes, defaults."""

    @njit
    def probe(hw, out, col=KL.Lin.TAB):
        out[KL.Cause.HOST] += hw[KL.Hw.HOST_STEP]
        acc = np.zeros(KL.Acc.size)
        return col + 1, acc.shape[0], out[SL.StepLog.CAUSE - 2 : SL.StepLog.CAUSE].sum()

    hw = np.arange(KL.Hw.size, dtype=np.float64)
    out = np.zeros(KL.Cause.size)
    assert probe(hw, out) == (KL.Lin.TAB + 1, KL.Acc.size, 0.0)
    assert out[KL.Cause.HOST] == KL.Hw.HOST_STEP


KERNEL = ("core/kernel.py", "core/kernel_lookup.py")
SERVING = (
    "modes/serving/scheduler.py",
    "modes/serving/parts.py",
    "modes/serving/pick.py",
    "modes/serving/stepcost.py",
    "modes/serving/recv.py",
)
# layout -> the jitted modules that read (or fill) its array
CONSUMERS = {
    "Cause": KERNEL,
    "Lin": KERNEL,
    "Law": KERNEL,
    "OpPath": KERNEL,
    "Acc": KERNEL,
    "Link": KERNEL,
    "Call": KERNEL,
    "Hw": KERNEL,
    "Cap": KERNEL,
    "Step": KERNEL,
    "Stage": ("core/pipeline.py", "core/parallel.py"),
    "Branch": ("core/grid_kernel.py",),
    "ReadModel": ("core/kv_costs.py",),
    "Eng": SERVING,
    "Req": SERVING,
    "Recv": SERVING,
    "StepLog": SERVING,
    "State": SERVING,
    "Seq": SERVING,
    "Ix": SERVING,
    "Cnt": SERVING,
    "Fb": SERVING,
    "Adm": ("modes/serving/admission.py", "modes/serving/scheduler.py"),
    "Agg": SERVING,
}
# fields no consumer names: the zero a zeroed array starts at, which the kernel takes as its default
IMPLICIT = {("State", "NEW"), ("OpPath", "ALL")}  # ix = np.zeros(...): every request starts new;
# an op on neither the decode nor the prefill path runs for every sequence


def test_every_layout_has_its_consumers():
    assert set(CONSUMERS) == set(LAYOUTS)


@pytest.mark.parametrize("name", sorted(CONSUMERS))
def test_every_field_is_read_by_its_kernel(name):
    text = source(*CONSUMERS[name])
    unread = [
        n
        for n in fields_with_aliases(LAYOUTS[name])
        if (name, n) not in IMPLICIT and not re.search(rf"\b{name}\.{n}\b", text)
    ]
    assert not unread, f"{name} fields no kernel reads: {unread} (drop them or use them)"


def test_implicit_fields_are_the_zero_of_their_array():
    assert all(getattr(LAYOUTS[lay], n) == 0 for lay, n in IMPLICIT)


def test_every_op_column_is_filled():
    """core/build.py op_row and the operator families (opcost) write every column of op_lin."""
    text = source(
        "core/build.py", *[str(p.relative_to(FRAMEWORK)) for p in (FRAMEWORK / "opcost").glob("*.py")]
    )
    unfilled = [n for n in fields_with_aliases(KL.Lin) if not re.search(rf"\bLin\.{n}\b", text)]
    assert not unfilled


def dict_keys(*modules) -> set:
    """The string keys of every dict literal in the modules' source."""
    keys = set()
    for m in modules:
        for node in ast.walk(ast.parse(Path(m.__file__).read_text())):
            if isinstance(node, ast.Dict):
                keys |= {
                    k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
                }
    return keys


@pytest.mark.parametrize(
    "name, producers, extra",
    [
        ("Eng", (engine_vector,), set()),
        ("Hw", (build, parallel), set()),
        ("Call", (gpu,), {"stage"}),  # build adds the stage
        ("Call", (dataflow,), {"stage"}),
        ("Cap", (full,), set()),  # the KV policy interface (every policy: build's Cap.vector)
        ("ReadModel", (kv_costs, full), set()),
    ],
)
def test_every_vector_field_has_a_producer(name, producers, extra):
    """The vectors built by name (Layout.vector) have a value for every field in their producers:
    the engine vector (engine_vector.engine_inputs), the machine vector (build.machine_vector), each
    execution model's call dicts, a KV policy's kernel_params, the read model."""
    lay = LAYOUTS[name]
    missing = {n.lower() for n in lay.names} - dict_keys(*producers) - extra
    assert not missing


def test_reference_reads_every_engine_field():
    """The serving scheduler's pure-Python twin reads every field of the engine vector by name."""
    from decodelab.modes.serving.reference import engine_dict

    eng = np.arange(SL.Eng.size, dtype=np.float64)
    eng[SL.Eng.ORDER] = 1.0
    named = engine_dict(eng, [4.0])
    text = source(
        "modes/serving/reference.py",
        "modes/serving/reference_step.py",
        "modes/serving/reference_parts.py",
        "modes/serving/reference_recv.py",
    )
    for n, at in SL.Eng:
        key = n.lower()
        assert re.search(rf'eng(\["|\.get\("){key}"', text), f"reference.py never reads eng[{key!r}]"
        assert named[key] == (SL.ORDERS[1] if key == "order" else float(at))


def test_no_hand_numbered_constants_in_the_kernels():
    """No jitted module numbers array positions by hand (`A, B = range(2)`, `X = 26`) any more."""
    jitted = ("core/kernel.py", "kernel_layout.py", "core/kernel_lookup.py", "core/pipeline.py")
    jitted += ("core/grid_kernel.py", "core/kv_costs.py", "modes/serving/layout.py") + SERVING
    jitted += ("modes/serving/admission.py",)
    for p in jitted:
        tree = ast.parse((FRAMEWORK / p).read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                f = node.value.func
                assert not (isinstance(f, ast.Name) and f.id == "range"), f"{p}: {ast.unparse(node)}"
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                target = ast.unparse(node.targets[0])
                assert not isinstance(node.value.value, int), f"{p}: {target} = {node.value.value}"


def test_numba_cache_key_covers_every_jitted_and_layout_module():
    """The Numba cache directory is named by a hash of these sources (framework/__init__.py): a
    jitted module or a layout missing from it would let an edit load stale compiled code."""
    import decodelab

    listed = set(decodelab._JITTED)
    jitted = {str(p.relative_to(FRAMEWORK)) for p in FRAMEWORK.rglob("*.py") if "njit" in p.read_text()}
    layouts = {str(Path(m.__file__).relative_to(FRAMEWORK)) for m in (KL, SL)}
    assert jitted | layouts <= listed


def test_names_read_through_a_module_exist():
    """Every `alias.NAME` a framework or components module reads through an imported decodelab
    module exists there: a layout name the kernels no longer have (kernel.N_STEP, scheduler.E_READY)
    fails here, not at run time in a sweep worker."""
    import importlib
    import importlib.util

    missing = []
    for path in [*FRAMEWORK.rglob("*.py"), *(FRAMEWORK.parent / "components").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("decodelab"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    try:
                        if importlib.util.find_spec(full) is not None:  # a module, not a name
                            aliases[a.asname or a.name] = full
                    except ModuleNotFoundError:  # a name imported from a module
                        pass
            elif isinstance(node, ast.Import):
                aliases.update(
                    {a.asname: a.name for a in node.names if a.asname and a.name.startswith("decodelab")}
                )
        for node in ast.walk(tree):  # a parameter or local of the alias's name shadows it
            if isinstance(node, ast.arg) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
                aliases.pop(getattr(node, "arg", None) or getattr(node, "id", None), None)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                if not hasattr(importlib.import_module(aliases[node.value.id]), node.attr):
                    missing.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert not missing
