"""Evaluation never changes the model: a fit's final agent, scored three ways, gives the fit's own final
validation answers task for task: the fit's last validation, `main.py test --ckpt_path <last.ckpt>`, and
`main.py test` on the exported agent folder with the run's config and no other flag (as README,
"Export and evaluate", writes it). For full fine-tuning, LoRA and a shared base, each with a warm start
in its config that `test` must not run on the trained agent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from genenv_pl.cli import cli_main
from test_export import TINY, _hf_folder, _run

WARM = {"steps": 30, "batch_size": 16}
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
POLICIES = {
    "full": ({"model": "tiny", "tiny": TINY, "warm_start": WARM}, {"model": "tiny", "tiny": TINY, "warm_start": WARM}, False),
    "lora": ({"model": "tiny", "tiny": TINY, "lora": {"r": 4, "alpha": 8}, "warm_start": WARM},
             {"model": "tiny", "tiny": TINY, "warm_start": WARM}, False),
    "shared_base": ({"model": "tiny", "tiny": TINY, "lora": {"r": 4, "alpha": 8}, "warm_start": WARM},
                    {"model": "tiny", "tiny": TINY, "lora": {"r": 4, "alpha": 8}, "warm_start": WARM}, True),
    # the real-model recipes' shape (configs/cpu/bfcl.yaml with SmolLM2): a pretrained model folder, a LoRA
    # warm start merged into it (cached), a fresh adapter for co-evolution; "HF" is a local folder made here
    "pretrained_lora": ({"model": "HF", "lora": {"r": 16, "alpha": 32, "target_modules": ALL7}, "warm_start": WARM},
                        {"model": "HF", "lora": {"r": 16, "alpha": 32, "target_modules": ALL7}, "warm_start": WARM}, False),
}


def _answers(rows: list[dict]) -> dict[str, str]:
    return {r["id"]: r["response"] for r in rows}


def _test(tmp: Path, *args: str) -> tuple[dict[str, str], float]:
    cli = cli_main(["test", *args])
    rows = json.loads((tmp / "test_results.json").read_text())["rows"]
    return _answers(rows), float(cli.trainer.callback_metrics["eval/accuracy"])


@pytest.mark.parametrize("kind", list(POLICIES))
def test_three_ways_to_evaluate_a_trained_agent_give_one_answer_per_task(tmp_path, capsys, caplog, kind):
    agent, simulator, shared = POLICIES[kind]
    if agent["model"] == "HF":
        folder = _hf_folder(tmp_path / "base")
        agent, simulator = {**agent, "model": folder}, {**simulator, "model": folder}
    args = _run(tmp_path, agent=agent, simulator=simulator, shared_base=shared)
    fit = cli_main(["fit", *args, "--model.eval_at_start", "false"])
    fit_answers, fit_accuracy = _answers(fit.model.val_rows), float(fit.trainer.callback_metrics["val/accuracy"])
    assert len(fit_answers) > 10
    ckpt = str(tmp_path / "ckpt" / "last.ckpt")
    capsys.readouterr()

    answers, accuracy = _test(tmp_path, *args, "--ckpt_path", ckpt)
    assert answers == fit_answers and accuracy == fit_accuracy
    assert "warm-starting" not in capsys.readouterr().out

    out = tmp_path / "export"
    cli_main(["export", *args, "--ckpt_path", ckpt, "--out", str(out)])
    capsys.readouterr()
    answers, accuracy = _test(tmp_path, *args, "--model.agent.model", str(out / "agent"))
    assert "warm-starting" not in capsys.readouterr().out
    assert "a trained policy exported from" in caplog.text  # the one line that says what is evaluated
    assert answers == fit_answers and accuracy == fit_accuracy
    if kind == "pretrained_lora":  # a config naming GGUF weights (configs/cpu/bfcl.yaml): an export is a plain HF folder
        answers, _ = _test(tmp_path, *args, "--model.agent.model", str(out / "agent"),
                           "--model.agent.gguf_file", "SmolLM2-135M-Instruct.Q4_1.gguf")
        assert answers == fit_answers


def test_a_base_model_whose_warm_start_is_not_cached_is_not_trained_by_test(tmp_path, capsys):
    """`test` of a base model applies the config's warm start from the cache, never trains it."""
    agent, simulator, _ = POLICIES["full"]
    args = _run(tmp_path, agent=agent, simulator=simulator)
    with pytest.raises(SystemExit) as exit_:
        cli_main(["test", *args])
    message = str(exit_.value.code)
    assert "model.agent.warm_start:" in message and "test and validate never train a model" in message
    assert "warm-starting" not in capsys.readouterr().out



@pytest.mark.parametrize("epoch, val_every, every, sampled", [
    (0, 1, 1, True), (0, 1, 2, False), (1, 1, 2, True), (3, 4, 2, False), (7, 4, 2, True), (15, 4, 2, True),
    (11, 4, 2, False), (3, 2, 2, True), (5, 2, 2, False), (4, None, 3, True), (2, 1, 3, True), (1, 1, 3, False)])
def test_a_fit_samples_at_every_nth_scheduled_validation(epoch, val_every, every, sampled):
    """data.coevo.eval_samples_every: validation after 0-based `epoch` samples when the epoch count is a multiple
    of every x check_val_every_n_epoch (the pilot's 64-task validations sample at 128 and 256 tasks); validation
    by steps samples each time."""
    from genenv_pl.evaluation import samples_this_validation

    assert samples_this_validation(epoch, val_every, every) is sampled
