"""Which benchmarks' data is under the data root: one line per benchmark, what is there, what is missing
and where to get it.

    python scripts/check_data.py                      # every benchmark, under $GENENV_DATA_ROOT
    python scripts/check_data.py --bench bfcl         # one (repeat --bench, or name several)
    python scripts/check_data.py --data-root ../shared/benchmarks

The data root: --data-root, else $GENENV_DATA_ROOT, as for `main.py` (where a config's
`data.env_args.data_root` comes first). Each benchmark is checked file by file against the files
its environment class declares that it reads (`required_files` in genenv_pl/envs/<name>.py), here all of
them: every category, level and split the environment supports, the whole benchmark. `main.py fit`,
`validate` and `test` run the same check before building anything, on the files their config reads.
arithmetic is built in and reads no data.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from genenv_pl.envs import REGISTRY, ConfigError  # noqa: E402
from genenv_pl.envs.base import DATA_ROOT_ENV  # noqa: E402
from genenv_pl.envs.datacheck import data_root, data_status  # noqa: E402

EPILOG = f"""\
exit status:
  0  every benchmark checked is present (with --bench: every one named; without: all of them)
  1  a benchmark checked is missing or incomplete (its line says what is missing and where to get it)
  2  bad usage: no data root (neither --data-root nor ${DATA_ROOT_ENV}), or an unknown benchmark
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", default=None,
                    help=f"the folder holding one folder per benchmark (default: ${DATA_ROOT_ENV})")
    ap.add_argument("--bench", action="extend", nargs="+", default=None, metavar="NAME",
                    help=f"benchmarks to check, as data.env names them ({', '.join(sorted(REGISTRY))}, or "
                         "package.module:ClassName); default: all registered ones")
    args = ap.parse_args(argv)
    names = list(dict.fromkeys(args.bench or sorted(REGISTRY)))
    root, origin = (args.data_root, "--data-root") if args.data_root else data_root()  # (main.py's rule)
    statuses = []
    for name in names:
        try:
            statuses.append(data_status(name, root or "", env_args=None))
        except ConfigError as e:
            print(f"error: --bench: {e}", file=sys.stderr)
            return 2
    if not root and any(s.folder is not None for s in statuses):
        print(f"error: no data root: pass --data-root or set {DATA_ROOT_ENV} to the folder that holds one folder "
              "per benchmark (docs/benchmarks.md, 'Data')", file=sys.stderr)
        return 2
    if root:
        print(f"data root {os.path.abspath(root)} (from {origin})")
    for status in statuses:
        print(status.line())
    return 0 if all(s.present for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
