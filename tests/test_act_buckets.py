"""The interactive player (`evaluation.act`) sends a padding backend its prompts in groups of similar
length, and the replies come back in the conversations' order, each what the prompt gets on its own."""
from __future__ import annotations

import pytest

from genenv_pl.backends.hf import HFBackend
from genenv_pl.evaluation import ACT_MAX_PADDING, act, length_buckets
from test_hf_cache import _policy


@pytest.mark.parametrize("lengths, max_padding, groups", [
    ([], 0.25, []),
    ([7], 0.25, [[0]]),
    ([10, 10, 10], 0.0, [[0, 1, 2]]),  # equal lengths: no padding at all
    ([100, 10, 11], 0.25, [[1, 2], [0]]),  # shortest first; 100 would pad 10 and 11 to 300 tokens for 121
    ([12, 10, 11], 0.25, [[1, 2, 0]]),  # 36 padded tokens for 33: within 25%
    ([12, 10, 11], 0.0, [[1], [2], [0]]),  # no padding allowed: one call per length
    ([1000, 1100, 3800, 1050], 0.25, [[0, 3, 1], [2]]),  # games in lockstep, one long history
    ([1000, 1100, 3800, 1050], 10.0, [[0, 3, 1, 2]]),  # padding allowed: one call
])
def test_length_buckets(lengths, max_padding, groups):
    assert length_buckets(lengths, max_padding) == groups
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))


class _Recording(HFBackend):
    def __init__(self):
        super().__init__()
        self.calls: list[list[str]] = []

    def generate(self, policy, prompts, params):
        self.calls.append(list(prompts))
        return super().generate(policy, prompts, params)


def test_act_groups_prompts_by_length_and_answers_each_as_on_its_own():
    policy = _policy()
    texts = ["12+34=" * 20, "7+8=", "12+34=" * 21, "8+7="]  # 120, 4, 126 and 4 tokens
    conversations = [[{"role": "user", "content": t}] for t in texts]
    backend = _Recording()
    replies = act(backend, policy, conversations, max_new_tokens=12)
    prompts = [policy.render(c) for c in conversations]
    lengths = [len(ids) for ids in policy.encode(prompts)]
    assert [[prompts.index(p) for p in call] for call in backend.calls] == length_buckets(lengths, ACT_MAX_PADDING)
    assert len(backend.calls) == 2  # the two short prompts together, the two long ones together
    alone = [act(HFBackend(), policy, [c], max_new_tokens=12)[0] for c in conversations]
    assert replies == alone and any(replies)


def test_a_backend_that_does_not_pad_gets_one_call():
    policy = _policy()
    backend = _Recording()
    backend.pads_batches = False
    act(backend, policy, [[{"role": "user", "content": t}] for t in ("1", "12+34=" * 20)], max_new_tokens=4)
    assert len(backend.calls) == 1
