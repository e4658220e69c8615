"""The default run's pytest-xdist groups (tests/conftest.py SHARED_FIXTURE_GROUPS, `--dist loadgroup`
in pyproject.toml) hold: a grouped test's node id carries its group, which is what sends a group's
tests to one worker. pytest 9.2's structured node ids drop it silently (pytest-dev/pytest-xdist issue
#1386), and every worker then builds each expensive shared fixture again."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("canary")
def test_a_grouped_test_carries_its_group_under_loadgroup(request):
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@canary"), (
        f"{request.node.nodeid}: --dist loadgroup lost the test's xdist_group (pyproject.toml pins pytest < 9.2)"
    )
