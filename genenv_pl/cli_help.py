"""Help text for what the parser cannot list itself: the keys of `model.backend_args` (a dict whose
keys depend on the backend) and the init args of the callbacks (given as class paths under
`trainer.callbacks`). Both are read from the classes' docstrings, so the help and the code share one
source. The sources are parsed, not imported: importing the vLLM backend configures vLLM."""
from __future__ import annotations

import ast
import importlib.util
import textwrap

BACKENDS = {"hf": ("genenv_pl.backends.hf", "HFBackend"), "vllm": ("genenv_pl.backends.vllm", "VLLMBackend")}
CALLBACKS = [("callbacks.alpha_curriculum", "AlphaCurriculumCallback"), ("callbacks.samples", "SampleTableCallback"),
             ("callbacks.conditioning", "SimulatorConditioningCallback"), ("callbacks.progress", "RolloutProgress"),
             ("callbacks.heap_trim", "HeapTrim")]
SUMMARY = ("callbacks.run_summary", "RunSummary")  # added to every run by the CLI, not listed in configs
WIDTH = 100


def init_args(module: str, name: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(first paragraph of the class docstring, [(argument, "type, default: value", description)]) of
    `name.__init__` in `module`."""
    import docstring_parser

    with open(importlib.util.find_spec(module).origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    doc = docstring_parser.parse("\n" + (ast.get_docstring(init) or ""), docstring_parser.DocstringStyle.GOOGLE)
    described = {p.arg_name: " ".join((p.description or "").split()) for p in doc.params}
    args = init.args.args[1:]
    defaults = [None] * (len(args) - len(init.args.defaults)) + list(init.args.defaults)
    rows = []
    for arg, default in zip(args, defaults):
        kind = ast.unparse(arg.annotation) if arg.annotation is not None else "Any"
        kind += f", default: {ast.unparse(default)}" if default is not None else ""
        rows.append((arg.arg, kind, described.get(arg.arg, "")))
    # the whole first paragraph: its first line may end mid-sentence
    summary = " ".join((ast.get_docstring(cls) or "").split("\n\n")[0].split())
    return summary, rows


def _entries(rows: list[tuple[str, str, str]]) -> list[str]:
    out = []
    for arg, kind, text in rows:
        out.append(f"  {arg} ({kind})")
        out += textwrap.wrap(text, WIDTH, initial_indent="      ", subsequent_indent="      ")
    return out


def backend_args_help() -> str:
    # jsonargparse sets a dict option as a whole, so a dict given later (on the command line or in a later
    # --config file) replaces the earlier one with all its keys; a dotted key sets that one key alone.
    lines = textwrap.wrap("Keys of --model.backend_args for each --model.backend. Set one key with a dotted option, "
                          "e.g. --model.backend_args.max_batch_size 64, which keeps the config's other keys; a whole "
                          "dict (--model.backend_args '{max_batch_size: 64}', or backend_args in a later --config "
                          "file) replaces all of them, as it should where --model.backend changes (the backends take "
                          "different keys). The same holds for --data.env_args.", WIDTH)
    for backend, (module, name) in BACKENDS.items():
        lines.append(f"{backend} ({name}):")
        lines += _entries(init_args(module, name)[1])
    return "\n".join(lines)


def callbacks_help() -> str:
    lines = ["Add under trainer.callbacks as {class_path: callbacks.<Name>, init_args: {...}}:"]
    lines += textwrap.wrap(f"Every run also has callbacks.RunSummary: {init_args(*SUMMARY)[0]}", WIDTH,
                           subsequent_indent="    ")
    for module, name in CALLBACKS:
        summary, rows = init_args(module, name)
        lines += textwrap.wrap(f"callbacks.{name}: {summary}", WIDTH, subsequent_indent="    ")
        lines += _entries(rows)
    return "\n".join(lines)
