"""bench/bfcl_error_kinds.py: which check of BFCL's AST checker a wrong answer fails first, on real
evaluation items (simple_python_5: solve_quadratic(a=3, b=-11, c=-4, root_type="all"))."""
import json
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import bfcl_error_kinds as ek  # noqa: E402

from genenv_pl.envs.bfcl import BFCLEnv  # noqa: E402


def tc(name: str, **params) -> str:
    return "<think>\n</think>\n<tool_call>\n" + json.dumps({"name": name, "parameters": params}) + "\n</tool_call>"


@pytest.fixture(scope="module")
def quadratic():
    tasks = BFCLEnv(categories=["simple_python"], simulator_writes="request").eval_tasks()
    return next(t for t in tasks if t.id == "simple_python_5")


@pytest.mark.parametrize("response, kind, detail", [
    ("solve it", "format", []),
    (tc("solve_quadratic", a=3, b=-11, c=-4, root_type="all") * 2, "call_count", []),
    (tc("solve_cubic", a=3, b=-11, c=-4), "wrong_function", ["solve_cubic for solve_quadratic"]),
    (tc("solve_quadratic", a=3, c=-4, root_type="all"), "missing_param", ["b"]),
    (tc("solve_quadratic", a=3, b=-11, c=-4, root_type="all", d=1), "unexpected_param", ["d"]),
    (tc("solve_quadratic", a=3, b=11, c=-4, root_type="all"), "wrong_value", ["b=11 not in [-11]"]),
    # an optional argument the gold requires (no "" option), left out
    (tc("solve_quadratic", a=3, b=-11, c=-4), "wrong_value", ['root_type left out (gold: ["all"])']),
])
def test_error_kind(quadratic, response, kind, detail):
    assert ek.error_kind(quadratic, response) == (kind, detail)


def test_a_right_answer_is_right(quadratic):
    # the repaired-call method rests on the gold's concrete call passing the checker
    assert BFCLEnv(categories=["simple_python"]).score(quadratic, tc("solve_quadratic", a=3, b=-11, c=-4,
                                                                    root_type="all"))["accuracy"] == 1.0
