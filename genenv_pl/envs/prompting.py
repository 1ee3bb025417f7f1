"""What a simulator prompt says about the agent's recent success (`data.env_args.sim_prompt`).

The paper says only that the simulator sees "recent success statistics". Two readings:

- "rule": the statistic and the curriculum rule spelled out: make the task harder above 60% success,
  easier below 40%, keep its difficulty in between (the band around alpha = 0.5). An instruct-model
  simulator follows it from its first generation.
- "stats": the statistic alone ("The agent answers 63% of such questions."); what to do with it is
  left to the simulator, and to RWR, which rewards the tasks whose success lands near alpha.

Each environment words its own statistic and its own harder/easier hints; `success_guide` puts them
together. The warm-start cache needs no key of its own for this: a cached warm start is keyed on
the environment's warm-start examples, prompts included, so a prompt that changes changes the key.
"""
from __future__ import annotations

from genenv_pl.envs.base import ConfigError

SIM_PROMPTS = ("rule", "stats")
HARDER_ABOVE = 0.6  # rule: success above this asks for a harder task
EASIER_BELOW = 0.4  # rule: success below this asks for an easier one
UNKNOWN_STATS = "The agent's recent success rate on tasks like this one is not known yet."


def check_sim_prompt(value: object, allowed: tuple[str, ...] = SIM_PROMPTS) -> str:
    """`value` if it is one of `allowed`, else a one-line ConfigError naming the option."""
    if value not in allowed:
        names = " or ".join(repr(a) for a in allowed)
        raise ConfigError(f"data.env_args.sim_prompt must be {names}, got {value!r}")
    return value  # type: ignore[return-value]


def success_guide(success_rate: float | None, mode: str, *, stat: str, harder: str, easier: str,
                  unknown: str, keep: str = "keep a similar difficulty.", only: bool = True) -> str:
    """The prompt's sentence on the agent's success.

    Args:
        success_rate: the seed's recent success rate, None where none is known yet.
        mode: "rule" or "stats" (see the module docstring).
        stat: the statistic, "{rate}" standing for the rate as a percentage, no final period
            ("The agent answers {rate} of such questions").
        harder / easier / keep: "rule" only: what follows "<stat>: " above 60% / below 40% / in between,
            a whole clause with its period ("make it harder (more travellers).").
        unknown: "rule" only: the whole sentence for an unknown rate.
        only: "rule" only: write "only {rate}" below 40%.
    """
    if mode == "stats":
        return UNKNOWN_STATS if success_rate is None else stat.format(rate=f"{success_rate:.0%}") + "."
    if mode != "rule":
        check_sim_prompt(mode)
    if success_rate is None:
        return unknown
    if success_rate > HARDER_ABOVE:
        return f"{stat.format(rate=f'{success_rate:.0%}')}: {harder}"
    if success_rate < EASIER_BELOW:
        return f"{stat.format(rate=('only ' if only else '') + f'{success_rate:.0%}')}: {easier}"
    return f"{stat.format(rate=f'{success_rate:.0%}')}: {keep}"
