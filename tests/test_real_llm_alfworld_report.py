"""bench/real_llm_alfworld.py's report splits: paired differences by a label of the items (task type,
gold verb), pooled over a variant's seeds, and the verb of each greedy reply."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import real_llm_alfworld as study  # noqa: E402

# item keys as the study writes them: "<split>/<task type>/<task id>"
KEYS = ["valid_seen/look/a", "valid_seen/look/b", "valid_unseen/heat/c", "valid_unseen/heat/d"]


def _scores(*right: str) -> dict:
    """[accuracy, format error] per item: right on the items whose id is in `right`."""
    return {k: [float(k.rsplit("/", 1)[1] in right), 0.0] for k in KEYS}


@pytest.mark.parametrize("runs, want", [
    # one seed: look gains b (+0.5), heat loses c (-0.5)
    ({"genenv_s0": ("a", "b", "d")}, {"look": 0.5, "heat": -0.5}),
    # two seeds pooled item by item: b right in one of two seeds (+0.25); heat: c lost in both, d kept
    ({"genenv_s0": ("a", "b", "d"), "genenv_s1": ("a", "d")}, {"look": 0.25, "heat": -0.5}),
])
def test_breakdown_pairs_each_label_with_the_warm_start(runs, want):
    warm = _scores("a", "c", "d")
    items = {"warm_start": warm} | {stage: _scores(*right) for stage, right in runs.items()}
    result: dict = {}
    lines = study.breakdown(items, items, lambda k: k.split("/")[1], "task type", result, "by_task_type")
    table = result["by_task_type"]
    assert {t: row["genenv"]["greedy"]["diff"] for t, row in table.items()} == pytest.approx(want)
    assert table["look"]["warm_start"] == 0.5 and table["look"]["items"] == 2
    assert f"genenv ({len(runs)} seed{'s' * (len(runs) > 1)}) greedy / sampled" in lines[3]


def test_breakdown_needs_a_warm_start_and_a_scored_fit():
    assert study.breakdown({"genenv_s0": _scores("a")}, {}, lambda k: "x", "x", {}, "x") == []
    assert study.breakdown({"warm_start": _scores("a")}, {"warm_start": _scores("a")}, lambda k: "x", "x", {}, "x") == []


@pytest.mark.parametrize("response, verb", [
    ("<think>Next step toward the goal.</think>\n<response>go to desk 1</response>", "go"),
    ("<response> move book 2 to sidetable 1 </response>", "move"),
    ("<response>open cabinet 4", "open"),  # cut off at the token limit before the closing tag
    ("<response></response>", ""),
    ("go to desk 1", ""),  # no tag: a format error, no command
])
def test_reply_verb(response, verb):
    assert study.reply_verb(response) == verb


def _entry(task_type: str, rewards: list[float], history: int = 0, gold: str = "go to desk 1") -> dict:
    """A D_train entry as a checkpoint keeps it."""
    return {"epoch": 0, "rewards": rewards, "task": {"group": f"valid_seen/{task_type}", "meta": {"task_type": task_type},
                                                     "data": {"history": ["look"] * history, "gold": gold}}}


@pytest.mark.parametrize("entries, want", [
    # rolled out: mean of each task's mean reward; an all-equal group counts as zero-std
    ([_entry("heat", [1, 0]), _entry("heat", [1, 1])], {"tasks": 2, "rolled_out": 2, "mean_reward": 0.75, "zero_std": 0.5}),
    # "static": the fixed set, kept without rewards, has no reward to show (not 0)
    ([_entry("heat", []), _entry("heat", [])], {"tasks": 2, "rolled_out": 0, "mean_reward": None, "zero_std": None}),
    # both: the reward is over the rolled-out tasks only
    ([_entry("heat", []), _entry("heat", [0, 1])], {"tasks": 2, "rolled_out": 1, "mean_reward": 0.5, "zero_std": 0.0}),
])
def test_pool_summary_rewards_only_over_rolled_out_tasks(entries, want):
    assert study.pool_summary(entries)["by_task_type"]["heat"] == want


def test_pool_summary_counts_history_and_gold_verbs_and_cells_show_a_dash_without_rollouts():
    summary = study.pool_summary([_entry("look", [1, 0], 0), _entry("look", [], 3, "move mug 1 to desk 1")])
    assert summary["tasks"] == 2
    assert summary["history_length"] == {0: 1, 3: 1}
    assert summary["gold_verb"] == {"go": 1, "move": 1}
    assert study.pool_cell({"tasks": 4, "mean_reward": None}) == "4 (-)"
    assert study.pool_cell({"tasks": 4, "mean_reward": 0.25}) == "4 (0.25)"
