from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.backends.hf import HFBackend


def make_backend(name: str, **kwargs) -> GenerationBackend:
    if name == "hf":
        return HFBackend(**kwargs)
    if name == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise SystemExit("backend 'vllm' needs vLLM: pip install 'genenv_pl[vllm]'") from None
        raise NotImplementedError("the vLLM backend is not implemented yet (see the issue tracker)")
    raise ValueError(f"unknown generation backend {name!r}; choose 'hf' or 'vllm'")


__all__ = ["Generation", "GenerationBackend", "HFBackend", "SamplingParams", "make_backend"]
