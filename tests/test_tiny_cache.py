"""The on-disk cache of from-scratch (warm-started) policies must key on the tokenizer's tokens:
a model trained with one tokenizer is useless with another one of the same size."""
from __future__ import annotations

import os

from genenv_pl.envs import make_env
from genenv_pl.models.factory import PolicyConfig, build_policy
from genenv_pl.models.tiny import TinyModelSpec
from genenv_pl.warmstart import WarmStartConfig


class _OtherCorpus(type(make_env("arithmetic"))):
    """The same environment with another tokenizer corpus: as many tokens, other merges."""

    def tokenizer_corpus(self):
        return super().tokenizer_corpus() + ["qz"] * 2000


def test_another_tokenizer_gets_another_cached_model(tmp_path):
    cfg = PolicyConfig(tiny=TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=64,
                                     tokenizer_vocab_size=260),  # 256 bytes + 3 specials + 1 merge: equal sizes
                       warm_start=WarmStartConfig(steps=2, batch_size=4))
    a = build_policy(cfg, "agent", make_env("arithmetic", eval_per_level=5), str(tmp_path))
    b = build_policy(cfg, "agent", _OtherCorpus(eval_per_level=5), str(tmp_path))
    models = sorted(d for d in os.listdir(tmp_path) if d.startswith("agent-"))
    assert len(models) == 2  # not the first model reloaded under the second tokenizer
    assert len(a.tokenizer) == len(b.tokenizer) and a.tokenizer.get_vocab() != b.tokenizer.get_vocab()
    again = build_policy(cfg, "agent", make_env("arithmetic", eval_per_level=5), str(tmp_path))  # a cache hit
    assert sorted(d for d in os.listdir(tmp_path) if d.startswith("agent-")) == models
    assert again.tokenizer.get_vocab() == a.tokenizer.get_vocab()


def test_building_a_policy_leaves_the_global_rng_as_a_cache_hit_does(tmp_path):
    """A cold build (initialise + warm-start) and a cache hit leave torch's global RNG where it was, so
    a run's rollouts do not depend on whether its warm start came from the cache."""
    import torch

    cfg = PolicyConfig(tiny=TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=64),
                       warm_start=WarmStartConfig(steps=2, batch_size=4))
    env = make_env("arithmetic", eval_per_level=5)
    for _ in ("cold", "cached"):
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        build_policy(cfg, "agent", env, str(tmp_path))
        assert torch.equal(torch.rand(3), expected)
