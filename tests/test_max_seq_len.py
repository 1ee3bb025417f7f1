"""`data.coevo.max_seq_len` (the paper's 9,000-token limit): prompts that leave no room for a full
response are not generated from, and are counted, never truncated silently or sent to the engine."""
from __future__ import annotations

from genenv_pl.backends.base import SamplingParams
from genenv_pl.backends.hf import HFBackend
from genenv_pl.coevo import generate_tasks, rollout
from genenv_pl.envs import make_env
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import Policy


class _Counting(HFBackend):
    def __init__(self):
        super().__init__()
        self.prompts: list[str] = []

    def generate(self, policy, prompts, params):
        self.prompts += prompts
        return super().generate(policy, prompts, params)


def _setup():
    env = make_env("arithmetic", max_level=6, seed_levels=[1, 3], seeds_per_level=2, eval_per_level=2)
    tok = train_tokenizer(env.tokenizer_corpus(), 400)
    spec = TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2, intermediate_size=64)
    policy = Policy(build_tiny_model(spec, len(tok), tok.eos_token_id, seed=0), tok, use_chat_template=False)
    return env, policy


def test_overlong_seeds_are_skipped_and_counted():
    env, policy = _setup()
    seeds = env.seed_tasks()
    params = SamplingParams(max_new_tokens=4, n=3)
    lengths = [len(policy.encode([policy.render(env.simulator_prompt(s, None))])[0]) for s in seeds]
    limit = sorted(lengths)[len(lengths) // 2] + params.max_new_tokens  # about half the seeds fit
    backend = _Counting()
    batches = generate_tasks(env, policy, backend, seeds, {}, params, max_seq_len=limit)
    assert len(batches) == len(seeds)  # every seed keeps its batch, in order
    for seed, batch, n in zip(seeds, batches, lengths):
        assert batch.seed is seed
        if n + params.max_new_tokens > limit:
            assert batch.generations == [] and batch.invalid["overlong_prompt"] == params.n
        else:
            assert len(batch.generations) == params.n and "overlong_prompt" not in batch.invalid
    assert len(backend.prompts) == sum(n + params.max_new_tokens <= limit for n in lengths) > 0
    # No limit: every seed is sent.
    backend = _Counting()
    generate_tasks(env, policy, backend, seeds, {}, params)
    assert len(backend.prompts) == len(seeds)


def test_overlong_tasks_get_no_rollouts():
    env, policy = _setup()
    tasks = [(t, "base", None) for t in env.seed_tasks()]
    params = SamplingParams(max_new_tokens=4, n=2)
    lengths = [len(policy.encode([policy.render(env.agent_prompt(t))])[0]) for t, _, _ in tasks]
    limit = min(lengths) + params.max_new_tokens  # only the shortest prompts fit
    groups = rollout(env, policy, HFBackend(), tasks, params, max_seq_len=limit)
    expected = [t for (t, _, _), n in zip(tasks, lengths) if n == min(lengths)]
    assert [g.task for g in groups] == expected
    assert all(len(g.rollouts) == 2 for g in groups)
    assert rollout(env, policy, HFBackend(), tasks, params, max_seq_len=params.max_new_tokens) == []
