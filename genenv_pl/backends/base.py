"""Generation backends: turn prompt strings into sampled continuations with their log-probs.

A backend knows nothing of environments or rewards; it only samples from a `Policy`."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from genenv_pl.policy import Policy


@dataclass
class SamplingParams:
    """How to sample. `n` continuations per prompt; greedy ignores temperature and top_p."""

    max_new_tokens: int = 64
    """Longest continuation, in tokens."""
    temperature: float = 1.0
    """Softmax temperature (log-probs for training are computed at the same temperature). Paper: 1.0."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens with this much probability (1.0: off)."""
    n: int = 1
    """Continuations per prompt (set by the trainer to K or G where it samples groups)."""
    greedy: bool = False
    """Argmax decoding; ignores temperature and top_p."""
    min_new_tokens: int = 0
    """EOS masked before this many tokens (0: off; benchmarks use it for fixed-length rollouts)."""
    logprobs: bool = True
    """Return each sampled token's log-prob (else NaN). Set by the trainer, off where nothing reads them
    (evaluation; rollouts whose old log-probs `grpo.old_logp` recomputes): the HF backend then keeps no
    logits, which for rows x new tokens x vocabulary run to tens of GB at a 7B model's 152K vocabulary."""


@dataclass
class Generation:
    prompt_ids: list[int]
    response_ids: list[int]  # up to and including EOS when the model stopped
    text: str  # decoded response without special tokens
    logprobs: list[float]  # log p of each response token under the (temperature-scaled) policy
    finished: bool  # stopped on EOS rather than on max_new_tokens


class GenerationBackend(ABC):
    pads_batches: bool = False
    """Whether one `generate` call pads its prompts to the longest (HF `generate`), so that callers with
    prompts of very different lengths do better to call it per group of similar length; vLLM does not pad."""

    @abstractmethod
    def generate(self, policy: Policy, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        """For each prompt, `params.n` generations (outer list aligned with `prompts`)."""

    def sync(self, policy: Policy) -> None:
        """Called after each optimizer step of `policy`: push its current weights to the engine
        (a no-op for HF, which samples from the training model itself)."""

    def release(self, policy: Policy) -> None:
        """`policy` will not generate again (a model built for one job, `GenEnvModule.frozen_policy`): drop what
        the backend holds for it (a no-op for HF, which holds nothing)."""
