"""Bamboogle: two-hop factual questions with one short gold answer.

Data: `<data_root>/bamboogle/test.jsonl` (verl-style rows; see that folder's SOURCE.md).

Scoring follows the open-source literature (Search-R1, FlashRAG): the answer is read from
`<response>...</response>` and compared with the gold after SQuAD normalization.
`reward` is token F1 (partial credit gives GRPO a signal on near misses); a rollout is a
success only at F1 = 1.0, which is exact match after normalization. `score` reports
`accuracy` (= exact match), `exact_match`, `f1` and `format_error`. The paper's protocol
(live web search, an LLM judge) is not available offline.

Split: every row has a stable id `bamboogle-<index>`; a row is held out for evaluation when
sha256(f"{split_salt}:{id}") mapped to [0, 1) is below `eval_fraction`, otherwise it is a seed.
The rule depends on the id alone, so the split never changes with file order or with rows
added later, and seeds and evaluation items can never overlap.

Search: rollouts and the single-step evaluation are closed book (one turn; no tool is offered
that nothing would answer). With `search_tool` set, `test` with `data.coevo.eval_episodes` also
plays search episodes (`play`, `search_episodes`): the agent is shown the tool format
`<tool_call>{"name": "search", "parameters": {"query": ...}}</tool_call>`, each call is answered
by the backend inside `<tool_response>`, and the episode's last `<response>` is scored. A backend is
any object with `search(query: str) -> list[str]` (see `SearchTool`), given as an import path
"package.module:ClassName" plus `search_tool_kwargs`; `genenv_pl.envs.bm25:BM25Search` searches a
local corpus folder offline. Training with search (multi-turn rollouts) is not built.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
from typing import Any, Callable, Protocol, runtime_checkable

from genenv_pl.envs.base import (ConfigError, DataError, Environment, InvalidTask, Message, Task, read_jsonl,
                                 resolve_data_root)
from genenv_pl.envs.prompting import check_sim_prompt, success_guide
from genenv_pl.envs.text_metrics import (exact_match, extract_json_object, extract_tag, normalize_answer,
                                         strip_tag_blocks, token_f1)

log = logging.getLogger(__name__)

DATA_FILE = "test.jsonl"
_MAX_PARSE_CHARS = 20_000  # simulator/agent text beyond this is ignored: bounded parsing cost


@runtime_checkable
class SearchTool(Protocol):
    """A search backend: returns text snippets, best first. Must not raise for odd queries."""

    def search(self, query: str) -> list[str]: ...


def split_bucket(task_id: str, salt: str) -> float:
    """A stable pseudo-random number in [0, 1) for `task_id` (same on every machine/run)."""
    digest = hashlib.sha256(f"{salt}:{task_id}".encode()).hexdigest()
    return int(digest[:12], 16) / 16**12


def parse_answer(text: str) -> tuple[str, bool]:
    """(answer, well_formed). Never raises.

    `<response>...</response>` wins (the last one). Otherwise, tolerantly: the text after an
    unclosed `<response>`, else the last non-empty line outside `<think>`/`<tool_call>` blocks,
    without an "Answer:" prefix. Those fallbacks count as format errors.
    """
    text = (text or "")[-_MAX_PARSE_CHARS:]
    resp = extract_tag(text, "response")
    if resp is not None:
        return resp, True
    opened = re.search(r"<response>(.*)$", text, flags=re.DOTALL | re.IGNORECASE)
    if opened:
        return _clean_line(opened.group(1)), False
    body = strip_tag_blocks(strip_tag_blocks(text, "think"), "tool_call")
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    return (_clean_line(lines[-1]) if lines else ""), False


def _clean_line(line: str) -> str:
    line = re.sub(r"</?\w+>", " ", line).strip()
    return re.sub(r"^(final answer|answer)\s*[:\-]\s*", "", line, flags=re.IGNORECASE).strip()


def parse_tool_call(text: str) -> str | None:
    """The query of the last well-formed search call in `text`, or None."""
    body = extract_tag((text or "")[-_MAX_PARSE_CHARS:], "tool_call")
    if body is None:
        return None
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or call.get("name") != "search":
        return None
    params = call.get("parameters") if isinstance(call.get("parameters"), dict) else call.get("arguments")
    query = params.get("query") if isinstance(params, dict) else None
    return query.strip() if isinstance(query, str) and query.strip() else None


def search_episodes(env: "BamboogleEnv", tasks: list[Task], act: Callable[[list[list[Message]]], list[str]],
                    tool: SearchTool | None = None, max_calls: int = 3, top_k: int = 3) -> list[list[str]]:
    """Each task answered in a multi-turn episode with a search tool, all of them in lockstep; returns each
    episode's assistant turns.

    `act(conversations) -> replies` answers a batch of conversations (the agent as a player, as ALFWorld's
    episodes use it). Each `<tool_call>` is executed and its results return to the model as a user turn
    inside `<tool_response>`; an episode ends at its first turn with a `<response>` or without a call,
    or after `max_calls` searches."""
    tool = tool or env.search_tool
    if tool is None:
        raise ValueError("search_episodes needs a SearchTool (env.search_tool is None)")
    chats = [env.search_prompt(t) for t in tasks]
    turns: list[list[str]] = [[] for _ in tasks]
    active = list(range(len(tasks)))
    while active:
        still = []
        for i, out in zip(active, act([chats[i] for i in active])):
            turns[i].append(out)
            query = parse_tool_call(out)
            if query is None or extract_tag(out, "response") is not None or len(turns[i]) > max_calls:
                continue
            try:
                results = [str(r) for r in tool.search(query)][:top_k]
            except Exception as err:  # noqa: BLE001  a flaky backend must not end the evaluation
                results = [f"search failed: {err}"]
            snippets = "\n".join(f"[{k + 1}] {r}" for k, r in enumerate(results)) or "no results"
            chats[i] = chats[i] + [{"role": "assistant", "content": out},
                                   {"role": "user", "content": f"<tool_response>\n{snippets}\n</tool_response>"}]
            still.append(i)
        active = still
    return turns


def answer_with_search(env: "BamboogleEnv", task: Task, generate: Callable[[list[Message]], str],
                       tool: SearchTool | None = None, max_calls: int = 3, top_k: int = 3) -> str:
    """One task's search episode (`search_episodes`) with a one-conversation `generate(messages) -> text`;
    the transcript of its assistant turns."""
    return "\n".join(search_episodes(env, [task], lambda chats: [generate(c) for c in chats], tool, max_calls,
                                      top_k)[0])


def load_search_tool(spec: str | SearchTool | None, kwargs: dict[str, Any] | None = None) -> SearchTool | None:
    """A SearchTool from an instance or an import path "package.module:ClassName"."""
    if spec is None or isinstance(spec, SearchTool):
        return spec
    module, _, attr = str(spec).partition(":")
    if not attr:
        raise ValueError(f"search_tool must look like 'package.module:ClassName', got {spec!r}")
    tool = getattr(importlib.import_module(module), attr)(**(kwargs or {}))
    if not isinstance(tool, SearchTool):
        raise TypeError(f"{spec} has no search(query) method")
    return tool


_CLOSED_BOOK = (
    "Answer the question with a short fact: a name, a date, a number or a place. "
    "First reason step by step inside <think>...</think>, then give only the final answer "
    "inside <response>...</response>."
)
_WITH_SEARCH = (
    "Answer the question with a short fact: a name, a date, a number or a place. "
    "Reason inside <think>...</think>. You may search the web: write exactly one line\n"
    '<tool_call>{"name": "search", "parameters": {"query": "your search query"}}</tool_call>\n'
    "and stop; the results come back inside <tool_response>...</tool_response>. "
    "When you know the answer, give only the final answer inside <response>...</response>."
)
_SIM_SYSTEM = (
    "You write new Bamboogle-style questions: each question needs two facts combined "
    "(two hops), e.g. 'Who was president of the United States in the year that Citibank was "
    "founded?' needs the founding year, then the president in that year. The answer is a short "
    "fact. Reply with one JSON object only."
)


def _question(system: str, task: Task) -> list[Message]:
    return [{"role": "system", "content": system}, {"role": "user", "content": f"Question: {task.data['question']}"}]


class BamboogleEnv(Environment):
    name = "bamboogle"
    data_folder = "bamboogle"
    data_source = ("the Bamboogle test set (Press et al., self-ask; HF dataset chiayewken/bamboogle) as test.jsonl "
                   "in verl's row format (question, answer), e.g. data/bamboogle/test.jsonl of "
                   "github.com/chenyiqun/Agentic-RAG")

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        return [DATA_FILE]

    def __init__(
        self,
        data_root: str | None = None,
        eval_fraction: float = 0.5,
        split_salt: str = "genenv-bamboogle",
        success_threshold: float = 1.0,
        search_tool: str | SearchTool | None = None,
        search_tool_kwargs: dict[str, Any] | None = None,
        max_search_calls: int = 3,
        num_hops: int = 2,
        max_answer_words: int = 8,
        max_question_chars: int = 300,
        copy_f1: float = 0.9,
        sim_prompt: str = "stats",
    ):
        """
        Args:
            data_root: folder holding `bamboogle/` (default: $GENENV_DATA_ROOT).
            eval_fraction: share of rows held out for evaluation (by id hash, see module doc).
            split_salt: changes which rows are held out; keep fixed across a study.
            success_threshold: reward (token F1) at which a rollout counts as a success.
            search_tool: None, a SearchTool, or "package.module:ClassName" (the offline one:
                "genenv_pl.envs.bm25:BM25Search"): answers the search calls of `test`'s search episodes
                (`data.coevo.eval_episodes`). Rollouts and the single-step evaluation stay closed book.
            search_tool_kwargs: constructor arguments for an import-path search tool (BM25Search: corpus).
            max_search_calls: searches an episode may make before its answer.
            num_hops: number of sub-questions a generated task must list in "hops".
            max_answer_words / max_question_chars: limits for generated tasks.
            copy_f1: a generated question with token F1 >= this against its seed is a copy.
            sim_prompt: what the simulator's prompt says about the agent's success on the seed:
                "rule" (the rate and "make the new one harder" above 60%, "easier" below 40%) or
                "stats" (the rate alone); see genenv_pl/envs/prompting.py.
        """
        self.sim_prompt = check_sim_prompt(sim_prompt)
        if not 0.0 <= eval_fraction <= 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1], got {eval_fraction}")
        self.root = resolve_data_root(data_root, self.data_folder)
        self.eval_fraction = eval_fraction
        self.split_salt = split_salt
        self.success_threshold = success_threshold
        self.search_tool = load_search_tool(search_tool, search_tool_kwargs)
        if max_search_calls < 0:
            raise ConfigError(f"data.env_args.max_search_calls: searches an episode may make, at least 0; got "
                              f"{max_search_calls}")
        self.max_search_calls = max_search_calls
        self.num_hops = num_hops
        self.max_answer_words = max_answer_words
        self.max_question_chars = max_question_chars
        self.copy_f1 = copy_f1
        self.skipped: dict[str, int] = {}
        tasks = self._load(os.path.join(self.root, DATA_FILE))
        self._eval = [t for t in tasks if split_bucket(t.id, split_salt) < eval_fraction]
        self._seeds = [t for t in tasks if split_bucket(t.id, split_salt) >= eval_fraction]
        self._eval_questions = {normalize_answer(t.data["question"]) for t in self._eval}

    # ---- data -------------------------------------------------------------------------
    def _skip(self, where: str, reason: str) -> None:
        log.warning("bamboogle: %s: %s; record skipped", where, reason)
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _load(self, path: str) -> list[Task]:
        if not os.path.isfile(path):
            raise DataError(f"bamboogle: data file {path!r} not found")
        tasks: list[Task] = []
        seen: set[str] = set()
        for lineno, row in read_jsonl(path, "bamboogle"):
            fields = self._fields(row)
            missing = [k for k, v in fields.items() if v is None]
            if missing:
                self._skip(f"{os.path.basename(path)}:{lineno}", f"missing field '{missing[0]}'")
                continue
            task_id = f"bamboogle-{fields['index']}"
            if task_id in seen:
                self._skip(f"{os.path.basename(path)}:{lineno}", "duplicate index")
                continue
            seen.add(task_id)
            tasks.append(Task(id=task_id, data={"question": fields["question"], "answer": fields["answer"]},
                              group="bamboogle"))
        return tasks

    @staticmethod
    def _fields(row: dict[str, Any]) -> dict[str, Any]:
        """question / answer / index from a verl-style row; None marks a missing field."""
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        reward_model = row.get("reward_model") if isinstance(row.get("reward_model"), dict) else {}
        prompt = row.get("prompt")
        question = extra.get("question")
        if not question and isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            question = prompt[0].get("content")
        answer = reward_model.get("ground_truth") or extra.get("answer")
        index = extra.get("index", row.get("index"))
        ok = lambda v: v.strip() if isinstance(v, str) and v.strip() else None  # noqa: E731
        return {"question": ok(question), "answer": ok(answer),
                "index": index if isinstance(index, (int, str)) and str(index).strip() else None}

    def seed_tasks(self) -> list[Task]:
        return list(self._seeds)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    # ---- simulator side -----------------------------------------------------------------
    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        aim = success_guide(
            success_rate, self.sim_prompt, stat="The agent answers {rate} of such questions",
            harder="make the new one harder (less famous entities, a less obvious bridge fact).",
            easier="make the new one easier (well-known entities, a direct bridge fact).",
            unknown="Keep the difficulty similar to the example.")
        hops = ", ".join(f'"sub-question {i + 1}"' for i in range(self.num_hops))
        user = (
            f"Example question: {seed.data['question']}\nExample answer: {seed.data['answer']}\n\n"
            f"Write one NEW question on a different topic that also needs {self.num_hops} facts "
            f"combined. {aim} The answer must be short (at most {self.max_answer_words} words) and "
            "must not appear in the question.\n"
            f'Reply with JSON only: {{"question": "...", "answer": "...", "hops": [{hops}]}}'
        )
        return [{"role": "system", "content": _SIM_SYSTEM}, {"role": "user", "content": user}]

    def parse_task(self, text: str, seed: Task) -> Task:
        obj = extract_json_object(text)
        if obj is None:
            raise InvalidTask("unparseable", "no JSON object")
        question, answer, hops = obj.get("question"), obj.get("answer"), obj.get("hops")
        if not isinstance(question, str) or not normalize_answer(question):
            raise InvalidTask("missing_field", "question")
        if not isinstance(answer, (str, int, float)) or isinstance(answer, bool) or not normalize_answer(str(answer)):
            raise InvalidTask("missing_field", "answer")
        question, answer = " ".join(question.split()), " ".join(str(answer).split())
        hop_texts = self._hop_texts(hops)
        if hop_texts is None:
            raise InvalidTask("bad_hops", f"need a list of {self.num_hops} non-empty sub-questions")
        if len(question) > self.max_question_chars:
            raise InvalidTask("question_too_long", f"{len(question)} chars")
        if len(answer.split()) > self.max_answer_words or len(answer) > 12 * self.max_answer_words:
            raise InvalidTask("answer_too_long", answer[:80])
        norm_q = normalize_answer(question)
        seed_q = seed.data["question"]
        if norm_q == normalize_answer(seed_q) or token_f1(question, seed_q) >= self.copy_f1:
            raise InvalidTask("copy_of_seed")
        if norm_q in self._eval_questions:
            raise InvalidTask("eval_leak", "the question is a held-out evaluation question")
        if f" {normalize_answer(answer)} " in f" {norm_q} ":
            raise InvalidTask("answer_in_question")
        digest = hashlib.sha1(f"{norm_q}||{normalize_answer(answer)}".encode()).hexdigest()[:12]
        return Task(id=f"{seed.id}/gen-{digest}", data={"question": question, "answer": answer, "hops": hop_texts},
                    difficulty=seed.difficulty, group="generated", meta={"seed_id": seed.id})

    def _hop_texts(self, hops: Any) -> list[str] | None:
        if not isinstance(hops, list) or len(hops) != self.num_hops:
            return None
        out = []
        for hop in hops:
            text = hop.get("question") if isinstance(hop, dict) else hop
            if not isinstance(text, str) or not text.strip():
                return None
            out.append(" ".join(text.split()))
        return out

    def task_key(self, task: Task) -> str:
        # Hops are commentary: the same question and answer is the same task.
        return f"{normalize_answer(task.data['question'])}||{normalize_answer(task.data['answer'])}"

    # ---- agent side ---------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        """Closed book: rollouts and the single-step evaluation are one turn, so no tool is offered there."""
        return _question(_CLOSED_BOOK, task)

    def search_prompt(self, task: Task) -> list[Message]:
        """The first turn of a search episode (`play`): the search tool described."""
        return _question(_WITH_SEARCH, task)

    def play(self, act, limit: int | None = None, batch_size: int = 1) -> dict[str, float]:
        """With a `search_tool`: the evaluation questions (the first `limit`) answered in search episodes
        (`search_episodes`, `batch_size` at a time), scored on the episode's last `<response>`: exact match,
        token F1, format errors and searches per question. Without one: no episodes."""
        if self.search_tool is None:
            return {}
        tasks = self.eval_tasks()[:limit] if limit is not None else self.eval_tasks()
        size, turns = max(batch_size, 1), []
        for start in range(0, len(tasks), size):
            turns += search_episodes(self, tasks[start:start + size], act, self.search_tool, self.max_search_calls)
        scores = [self.score(t, "\n".join(ts)) for t, ts in zip(tasks, turns)]
        n = max(len(tasks), 1)
        return {"exact_match": sum(s["exact_match"] for s in scores) / n, "f1": sum(s["f1"] for s in scores) / n,
                "format_error": sum(s["format_error"] for s in scores) / n,
                # an episode goes on past a turn only after searching for it: every turn but its last searched
                "searches": sum(len(ts) - 1 for ts in turns) / n,
                "questions": float(len(tasks))}

    def reward(self, task: Task, response: str) -> float:
        answer, _ = parse_answer(response)
        return token_f1(answer, task.data["answer"])

    def score(self, task: Task, response: str) -> dict[str, float]:
        answer, well_formed = parse_answer(response)
        em = exact_match(answer, task.data["answer"])
        return {"accuracy": em, "exact_match": em, "f1": token_f1(answer, task.data["answer"]),
                "format_error": float(not well_formed)}
