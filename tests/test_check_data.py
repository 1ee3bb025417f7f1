"""scripts/check_data.py and the CLI's data check (`genenv_pl.preflight.data_problem`): each benchmark checked
file by file against what its environment class declares that it reads (`required_files`), one line each with
where to get what is missing, and a run refused before anything is built when its config's data is missing."""
from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace

from genenv_pl.envs import env_class
from genenv_pl.envs.datacheck import data_status
from genenv_pl.preflight import data_problem

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = ["alfworld", "api_bank", "bamboogle", "bfcl", "travelplanner"]  # (arithmetic is built in)
# constructor arguments that read the whole benchmark, as `required_files(None)` declares it
ALL_OF_IT = {"bfcl": {"categories": "SUPPORTED"}, "api_bank": {"levels": ["level-1", "level-2", "level-3"]}}
# (benchmark, what is taken out of a copy of the data, the required path its line then names)
REMOVALS = [
    ("alfworld", "json_2.1.1/valid_unseen", "json_2.1.1/valid_unseen/*/*/game.tw-pddl"),
    ("api_bank", "init_database/Wiki.json", "init_database/Wiki.json"),
    ("api_bank", "data/all_apis.csv", "data/all_apis.csv"),
    ("api_bank", "lv1-lv2-samples/level-2-toolsearcher", "lv1-lv2-samples/level-2-toolsearcher/*.jsonl"),
    ("bamboogle", "test.jsonl", "test.jsonl"),
    ("bfcl", "possible_answer/BFCL_v4_simple_python.json", "possible_answer/BFCL_v4_simple_python.json"),
    ("bfcl", "multi_turn_func_doc/math_api.json", "multi_turn_func_doc/math_api.json"),
    ("travelplanner", "database/background/citySet_with_states.txt", "database/background/citySet_with_states.txt"),
]


def _folder(bench: str) -> str:
    return env_class(bench).data_folder


@pytest.fixture(scope="module")
def real_root() -> Path:
    """The data the tests use (tests/conftest.py: ../shared/benchmarks unless GENENV_DATA_ROOT says otherwise)."""
    root = Path(os.environ["GENENV_DATA_ROOT"])
    absent = [b for b in BENCHMARKS if not (root / _folder(b)).is_dir()]
    if absent:
        if os.environ.get("CI"):
            pytest.fail(f"CI: benchmark data {absent} missing under {root}")
        pytest.skip(f"no {absent} data under GENENV_DATA_ROOT={root}")
    return root


def _copy(real: Path, dst: Path, drop: tuple[str, str] | None = None, only_required: bool = False) -> Path:
    """`real` rebuilt under `dst` as links to its files: without `drop` (benchmark, path in its folder), or
    with only the files each benchmark's `required_files()` names."""
    for bench in BENCHMARKS:
        src = real / _folder(bench)
        if only_required:
            files = {Path(p) for rel in env_class(bench).required_files() for p in glob.glob(str(src / rel))}
        else:
            files = {p for p in src.rglob("*") if p.is_file()}
        for path in files:
            rel = path.relative_to(src).as_posix()
            if drop and drop[0] == bench and (rel == drop[1] or rel.startswith(drop[1] + "/")):
                continue
            (dst / _folder(bench) / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / _folder(bench) / rel).symlink_to(path)
    return dst


def _script():
    spec = importlib.util.spec_from_file_location("check_data", REPO / "scripts" / "check_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cfg(env: str, **env_args) -> Namespace:
    return Namespace(data=Namespace(env=env, env_args=env_args))


# ---- scripts/check_data.py -----------------------------------------------------------------------
def test_the_real_data_root_has_every_benchmark(real_root):
    """Run as a user runs it: every benchmark one line, present, exit 0."""
    run = subprocess.run([sys.executable, "scripts/check_data.py"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "GENENV_DATA_ROOT": str(real_root)})
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"data root {real_root} (from $GENENV_DATA_ROOT)"
    by_bench = {line.split()[0]: line for line in lines[1:]}
    assert sorted(by_bench) == sorted([*BENCHMARKS, "arithmetic"])
    assert all(line.split()[1] == "ok" for line in by_bench.values()), run.stdout
    assert "reads no data" in by_bench["arithmetic"]


@pytest.mark.parametrize("bench,removed,named", REMOVALS, ids=[f"{b}:{r}" for b, r, _ in REMOVALS])
def test_one_file_removed_reports_that_benchmark_alone(real_root, tmp_path, capsys, bench, removed, named):
    root = _copy(real_root, tmp_path, drop=(bench, removed))
    statuses = {b: data_status(b, str(root)) for b in BENCHMARKS}
    assert [b for b, s in statuses.items() if not s.present] == [bench]
    assert statuses[bench].missing == [named]
    script = _script()
    assert script.main(["--data-root", str(root)]) == 1  # all asked for (no --bench), one missing
    lines = capsys.readouterr().out.splitlines()
    missing = [line for line in lines if " MISSING " in line]
    assert len(missing) == 1 and missing[0].split()[0] == bench
    assert named in missing[0] and f"get it: {env_class(bench).data_source}" in missing[0]
    assert script.main(["--data-root", str(root), "--bench", bench]) == 1
    others = [b for b in BENCHMARKS if b != bench]
    assert script.main(["--data-root", str(root), "--bench", *others]) == 0


def test_an_absent_folder_and_usage_errors(tmp_path, capsys, monkeypatch):
    script = _script()
    assert script.main(["--data-root", str(tmp_path), "--bench", "bamboogle"]) == 1
    out = capsys.readouterr().out
    assert f"data folder '{tmp_path / 'bamboogle'}' does not exist" in out and "chiayewken/bamboogle" in out
    assert script.main(["--data-root", str(tmp_path), "--bench", "arithmetic"]) == 0
    assert script.main(["--data-root", str(tmp_path), "--bench", "nope"]) == 2
    assert "unknown environment 'nope'" in capsys.readouterr().err
    monkeypatch.delenv("GENENV_DATA_ROOT")
    assert script.main([]) == 2
    assert "no data root" in capsys.readouterr().err


def test_required_files_are_all_an_environment_reads(real_root, tmp_path):
    """Built on a copy holding only the files `required_files()` names, each environment has the same tasks
    as on the whole folder: nothing it reads is left out of the list (which the two checks rely on)."""
    from genenv_pl.envs import make_env
    from genenv_pl.envs.bfcl import SUPPORTED

    only = _copy(real_root, tmp_path, only_required=True)
    for bench in BENCHMARKS:
        args = {k: (list(SUPPORTED) if v == "SUPPORTED" else v) for k, v in ALL_OF_IT.get(bench, {}).items()}
        full = make_env(bench, data_root=str(real_root), **args)
        sparse = make_env(bench, data_root=str(only), **args)
        if bench == "alfworld":  # (its steps are replayed in the engine: compare the games it plays)
            assert [g.key for g in sparse.seed_games() + sparse.eval_games()] == \
                   [g.key for g in full.seed_games() + full.eval_games()] != []
            continue
        for split in ("seed_tasks", "eval_tasks"):
            tasks = [t.to_dict() for t in getattr(sparse, split)()]
            assert tasks == [t.to_dict() for t in getattr(full, split)()] and tasks, (bench, split)
        if bench == "api_bank":
            assert sparse.catalog == full.catalog and sparse.level3_dropped.keys() == full.level3_dropped.keys()


# ---- the check before a run (preflight) ----------------------------------------------------------
def test_the_shipped_configs_pass_on_the_real_data(real_root):
    for path in sorted([*REPO.glob("configs/*.yaml"), *REPO.glob("configs/cpu/*.yaml")]):
        data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
        env = data.get("env") or path.stem
        if env not in BENCHMARKS:
            continue
        args = {k: v for k, v in (data.get("env_args") or {}).items() if k != "data_root"}
        assert data_problem(_cfg(env, **args)) is None, path
        assert set(env_class(env).required_files(args)) <= set(env_class(env).required_files()), path


# (env_args, what is taken out, the path the message names or None: these arguments do not read it)
PREFLIGHT = [
    ("bfcl", {"categories": ["simple_python"]}, "possible_answer/BFCL_v4_simple_python.json",
     "possible_answer/BFCL_v4_simple_python.json"),
    ("bfcl", {"categories": ["multiple"]}, "possible_answer/BFCL_v4_simple_python.json", None),
    ("bfcl", {}, "multi_turn_func_doc/math_api.json", "multi_turn_func_doc/math_api.json"),  # the default category
    ("bfcl", {"categories": ["simple_python"]}, "multi_turn_func_doc/math_api.json", None),
    ("alfworld", {}, "json_2.1.1/valid_unseen", "json_2.1.1/valid_unseen/*/*/game.tw-pddl"),
    ("alfworld", {"eval_splits": ["valid_seen"]}, "json_2.1.1/valid_unseen", None),
    ("api_bank", {}, "init_database/Wiki.json", "init_database/Wiki.json"),
    ("api_bank", {"scoring": "input"}, "init_database/Wiki.json", None),
    ("api_bank", {}, "lv3-samples", None),  # level 3 is opt-in
    ("api_bank", {"levels": ["level-3"], "scoring": "input"}, "lv3-samples", "lv3-samples/*.txt"),
    ("travelplanner", {}, "database/train_ref_info.jsonl", "database/train_ref_info.jsonl"),
    ("bamboogle", {}, "test.jsonl", "test.jsonl"),
]


@pytest.mark.parametrize("env,env_args,removed,named", PREFLIGHT,
                         ids=[f"{e}:{a}:{r}" for e, a, r, _ in PREFLIGHT])
def test_preflight_checks_the_files_the_config_reads(real_root, tmp_path, env, env_args, removed, named):
    root = _copy(real_root, tmp_path, drop=(env, removed))
    problem = data_problem(_cfg(env, data_root=str(root), **env_args))
    if named is None:
        assert problem is None
        return
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"data.env {env}, data root {str(root)!r} (from data.env_args.data_root): ")
    assert f"data folder {str(root / _folder(env))!r} lacks {named} (1 of the " in problem
    assert f"get it: {env_class(env).data_source}" in problem
    assert problem.endswith(f"then check it with python scripts/check_data.py --data-root {root} --bench {env}")


def test_preflight_names_the_root_from_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_DATA_ROOT", str(tmp_path))
    problem = data_problem(_cfg("travelplanner"))
    assert problem.startswith(f"data.env travelplanner, data root {str(tmp_path)!r} (from $GENENV_DATA_ROOT): "
                              f"data folder {str(tmp_path / 'travelplanner')!r} does not exist; get it: ")
    assert problem.endswith("then check it with python scripts/check_data.py --bench travelplanner")
    monkeypatch.delenv("GENENV_DATA_ROOT")
    problem = data_problem(_cfg("travelplanner"))
    assert "data.env_args.data_root or $GENENV_DATA_ROOT, and neither is set" in problem and "travelplanner/" in problem


def test_preflight_leaves_other_problems_to_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_DATA_ROOT", str(tmp_path))
    assert data_problem(_cfg("arithmetic")) is None  # built in
    assert data_problem(_cfg("nope")) is None  # no such environment: the data module says so, as before
    assert data_problem(_cfg("examples.word_reverse:WordReverseEnv")) is None  # declares no data folder


def test_a_run_with_missing_data_stops_before_anything_is_built(tmp_path, monkeypatch):
    """In process: nothing is built (the trainer, the data module and the module are built, in that order, by
    `instantiate_classes`, which raises here)."""
    import genenv_pl.cli as cli

    def built(self):
        raise AssertionError("built before the data check")

    monkeypatch.setattr(cli.GenEnvCLI, "instantiate_classes", built)
    monkeypatch.delenv("GENENV_VERBOSE", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.cli_main(["validate", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bamboogle",
                      "--data.env_args", f"{{data_root: {tmp_path}}}"])
    message = str(exit_.value.code)
    assert message.startswith(f"error: data.env bamboogle, data root {str(tmp_path)!r}") and "\n" not in message


def test_main_py_fit_with_an_empty_data_root_fails_at_once(tmp_path):
    """The shipped BFCL CPU recipe, as a user runs it, against an empty data root: one line naming the root,
    the missing folder and the fix, well before any model would be loaded."""
    env = {**os.environ, "GENENV_DATA_ROOT": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    env.pop("GENENV_VERBOSE", None)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "main.py", "fit", "--config", "configs/bfcl.yaml", "--config",
                          "configs/cpu/bfcl.yaml"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.monotonic() - start
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr + run.stdout, run.stderr
    assert lines[0].startswith(f"error: data.env bfcl, data root {str(tmp_path)!r} (from $GENENV_DATA_ROOT): "
                               f"data folder {str(tmp_path / 'bfcl')!r} does not exist; get it: BFCL v4 data")
    assert "then check it with python scripts/check_data.py --bench bfcl" in lines[0]
    assert elapsed < 120, elapsed  # imports only (about 5 s on an idle core); a model load would come after
