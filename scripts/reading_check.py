"""The codebase's reading check (issue 63): can a new reader follow one co-evolution epoch as the paper's
Algorithm 1? Prints each criterion with what it measured, PASS or FAIL, and exits 1 while any fails.

    python scripts/reading_check.py

It reads the source (Python's ast), imports nothing of the package, and runs in well under a second.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "genenv_pl"
MAX_LINES = 45
MAX_RANK_NAMES = 6
RANK_NAMES = re.compile(r"\b(RankSync|RankSeam|_sharded\w*|seam)\b")
# parameters that existed only so that tests could swap a stage of the loop (tests wrap module-level functions
# instead); looked for outside envs/, where a `generate` callable is an environment's real API (answer_with_search)
TEST_HOOKS = ("generate", "roll")


@dataclass
class Finding:
    criterion: str
    measured: str
    ok: bool


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _body_lines(fn: ast.FunctionDef) -> int:
    """Lines of the function after its signature and docstring (blank lines and comments included)."""
    first = fn.body[1] if ast.get_docstring(fn) and len(fn.body) > 1 else fn.body[0]
    return fn.end_lineno - first.lineno + 1


def _source(path: Path, fn: ast.FunctionDef) -> str:
    return "\n".join(path.read_text().splitlines()[fn.lineno - 1:fn.end_lineno])


def check(root: Path = REPO) -> list[Finding]:
    pkg = root / "genenv_pl"
    epoch, module = pkg / "epoch.py", pkg / "module.py"
    out = []
    for path, name in ((epoch, "run_epoch"), (module, "training_step")):
        fn = _function(path, name)
        n, variants = _body_lines(fn), _source(path, fn).count("cfg.variant")
        out.append(Finding(f"{name} <= {MAX_LINES} lines, no cfg.variant comparison",
                           f"{n} lines, {variants} cfg.variant", n <= MAX_LINES and variants == 0))
    text = module.read_text()
    k = text.count("trainer.datamodule")
    out.append(Finding("module.py never reads trainer.datamodule", f"{k} reads", k == 0))
    private = [p.relative_to(root).as_posix() for p in sorted(pkg.rglob("*.py")) if "_batches_that_stepped" in p.read_text()]
    out.append(Finding("no _batches_that_stepped in genenv_pl/", ", ".join(private) or "none", not private))
    patched = [p.relative_to(root).as_posix() for p in sorted([*pkg.rglob("*.py"), *(root / "callbacks").rglob("*.py")])
               if re.search(r"\.log_metrics\s*=", p.read_text())]
    out.append(Finding("no logger.log_metrics replaced", ", ".join(patched) or "none", not patched))
    hooks = []
    for p in sorted(q for q in pkg.rglob("*.py") if "envs" not in q.relative_to(pkg).parts):
        for fn in ast.walk(ast.parse(p.read_text())):
            if isinstance(fn, ast.FunctionDef):
                hooks += [f"{p.relative_to(root).as_posix()}:{fn.name}({a.arg})" for a in fn.args.args + fn.args.kwonlyargs
                          if a.arg in TEST_HOOKS]
    out.append(Finding("no test-injection parameter in genenv_pl/ (envs/ aside)", ", ".join(hooks) or "none", not hooks))
    names = len(RANK_NAMES.findall(text))
    out.append(Finding(f"module.py names the rank machinery at most {MAX_RANK_NAMES} times", f"{names} times",
                       names <= MAX_RANK_NAMES))
    return out


def main() -> int:
    findings = check()
    for f in findings:
        print(f"{'PASS' if f.ok else 'FAIL'}  {f.criterion}: {f.measured}")
    failed = sum(not f.ok for f in findings)
    print(f"{len(findings) - failed} of {len(findings)} pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
