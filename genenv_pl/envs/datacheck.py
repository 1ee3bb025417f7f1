"""Is a benchmark's data there? The files an environment declares that it reads (`Environment.data_folder`,
`Environment.required_files`) checked against a data root, with where to get them (`Environment.data_source`).

Used by scripts/check_data.py (every benchmark, every file it can read) and by the CLI before a run builds
anything (genenv_pl/preflight.py: the configured environment, the files its `data.env_args` make it read).
Imports no Lightning and no models: only the environment module asked about.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

from genenv_pl.envs import env_class
from genenv_pl.envs.base import data_root_source

CHECK_SCRIPT = "python scripts/check_data.py"
DATA_DOCS = "docs/benchmarks.md, 'Data'"


def data_root(env_args: dict[str, Any] | None = None) -> tuple[str | None, str]:
    """The data root an environment built with `env_args` reads and where that comes from
    (`base.data_root_source`); (None, "") when neither the argument nor $GENENV_DATA_ROOT is set."""
    return data_root_source((env_args or {}).get("data_root"))


@dataclass
class DataStatus:
    """One environment's data under one data root: each required path with the number of files it matches."""

    env: str  # the name `data.env` gives it
    folder: str | None  # <data_root>/<data_folder>; None: the environment reads no data
    source: str  # where to get the folder's files
    found: dict[str, int] = field(default_factory=dict)  # required path (or glob pattern) -> files matched

    @property
    def missing(self) -> list[str]:
        return [path for path, n in self.found.items() if not n]

    @property
    def present(self) -> bool:
        return not self.missing

    def problem(self, limit: int | None = None) -> str:
        """What is missing, in a few words: the folder, or the files it lacks (the first `limit` of them)."""
        if self.folder is not None and not os.path.isdir(self.folder):
            return f"data folder {self.folder!r} does not exist"
        missing = self.missing
        shown = missing if limit is None or len(missing) <= limit else missing[:limit]
        more = f" and {len(missing) - len(shown)} more" if len(shown) < len(missing) else ""
        return (f"data folder {self.folder!r} lacks {', '.join(shown)}{more} ({len(missing)} of the {len(self.found)} "
                "paths it reads)")

    def line(self, limit: int | None = 10) -> str:
        """One line for scripts/check_data.py (naming the first `limit` missing paths)."""
        if self.folder is None:
            return f"{self.env:<14} ok       built in, reads no data files"
        if self.present:
            counts = [f"{path}: {n} files" for path, n in self.found.items() if "*" in path]
            n = sum(self.found.values())
            return (f"{self.env:<14} ok       {self.folder}: {'the file' if n == 1 else f'all {n} files'} it reads "
                    f"{'is' if n == 1 else 'are'} there"
                    + (f" ({'; '.join(counts)})" if counts else ""))
        return f"{self.env:<14} MISSING  {self.problem(limit)}; get it: {self.source}"


def data_status(env: str, root: str, env_args: dict[str, Any] | None = None) -> DataStatus:
    """The data of the environment `env` (a registered name or package.module:ClassName) under `root`:
    with `env_args` (its constructor's arguments) the files an instance built with them reads, with None
    every file it can read. Raises ConfigError for a name that leads to no environment class."""
    cls = env_class(env)
    if cls.data_folder is None:
        return DataStatus(env, None, cls.data_source)
    folder = os.path.join(root, cls.data_folder)
    found = {path: _count(folder, path) for path in cls.required_files(env_args)}
    return DataStatus(env, folder, cls.data_source or f"see {DATA_DOCS}", found)


def _count(folder: str, path: str) -> int:
    full = os.path.join(folder, path)
    if "*" in path:
        return sum(1 for p in glob.glob(full) if os.path.isfile(p))
    return int(os.path.isfile(full))
