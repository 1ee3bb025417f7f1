import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Benchmarks live outside the repo (users bring their own copy); tests and CI use the shared copy.
os.environ.setdefault("GENENV_DATA_ROOT", str(REPO.parent / "shared" / "benchmarks"))
# absolute: the Lightning-run tests chdir into their tmp folders, which a relative root would not survive
os.environ["GENENV_DATA_ROOT"] = os.path.abspath(os.environ["GENENV_DATA_ROOT"])


@pytest.fixture(scope="session")
def data_root() -> str:
    return os.environ["GENENV_DATA_ROOT"]


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> Path:
    """One model cache for the whole run. The fit tests share `test_fit._override`'s tiny models, whose warm
    starts are cached under a digest of their config: each is trained once per run instead of once per file
    (a file with other models, or its own warm-start settings, gets its own entries beside them)."""
    return tmp_path_factory.mktemp("model-cache")


BENCHMARK_TESTS = {"test_alfworld.py": "alfworld", "test_alfworld_fit.py": "alfworld", "test_api_bank.py": "api-bank", "test_bamboogle.py": "bamboogle",
                   "test_bfcl.py": "bfcl", "test_travelplanner.py": "travelplanner"}


def pytest_collection_modifyitems(config, items):
    """Without a benchmark's data, its tests skip with the reason — except in CI, where missing
    data is an error (CI must test every benchmark)."""
    root = Path(os.environ["GENENV_DATA_ROOT"])
    for item in items:
        bench = BENCHMARK_TESTS.get(item.path.name)
        if bench and not (root / bench).is_dir():
            if os.environ.get("CI"):
                raise pytest.UsageError(f"CI: benchmark data {root / bench} is missing")
            item.add_marker(pytest.mark.skip(reason=f"no {bench} data under GENENV_DATA_ROOT={root}"))


@pytest.fixture(autouse=True)
def _restore_cwd():
    """Tests that run main.py from a tmp folder (tests/test_fit.py's `_fit`) change directory into it: each
    test ends where it began, so a later test's relative paths (the README's) do not depend on the order."""
    cwd = os.getcwd()
    yield
    os.chdir(cwd)
