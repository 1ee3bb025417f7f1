import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Benchmarks live outside the repo (users bring their own copy); tests and CI use the shared copy.
os.environ.setdefault("GENENV_DATA_ROOT", str(REPO.parent / "shared" / "benchmarks"))


@pytest.fixture(scope="session")
def data_root() -> str:
    return os.environ["GENENV_DATA_ROOT"]
