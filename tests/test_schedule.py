"""Rows start slowest first, by the measured figures shipped with the package."""

from __future__ import annotations

from swegreen.core.dataset import Instance
from swegreen.core.schedule import expected_seconds, slowest_first


def _instance(instance_id: str, repo: str) -> Instance:
    return Instance(
        instance_id=instance_id,
        repo=repo,
        base_commit="0" * 40,
        problem_statement="",
        version="1.0",
        patch="",
        test_patch="",
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
    )


def test_the_slowest_repositories_start_first_and_the_dataset_order_holds_otherwise() -> None:
    rows = [
        _instance("psf__requests-1", "psf/requests"),
        _instance("sample__a-1", "sample/a"),
        _instance("sympy__sympy-1", "sympy/sympy"),
        _instance("psf__requests-2", "psf/requests"),
        _instance("sample__b-1", "sample/b"),
        _instance("sympy__sympy-2", "sympy/sympy"),
    ]
    order = [i.instance_id for i in slowest_first(rows, {"sympy/sympy": 100, "psf/requests": 5})]
    # unknown repositories take the median (52.5): between the two
    assert order == [
        "sympy__sympy-1",
        "sympy__sympy-2",
        "sample__a-1",
        "sample__b-1",
        "psf__requests-1",
        "psf__requests-2",
    ]


def test_the_shipped_figures_are_read_and_order_sympy_before_requests() -> None:
    figures = expected_seconds()
    assert figures["sympy/sympy"] > figures["psf/requests"] > 0
    rows = [
        _instance("psf__requests-1", "psf/requests"),
        _instance("sympy__sympy-1", "sympy/sympy"),
    ]
    assert [i.repo for i in slowest_first(rows)] == ["sympy/sympy", "psf/requests"]
