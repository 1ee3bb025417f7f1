"""TravelPlanner, sole-planning mode: a query plus its reference information -> a day-by-day plan.

Data (`<data_root>/travelplanner/`, see its SOURCE.md): the 45 train queries with gold plans
(`finetuning_data/std_travelplanner.jsonl`) and their reference information
(`database/train_ref_info.jsonl`, aligned by line), the query texts of 144 of the 180 validation
queries (`postprocess/example_evaluation.jsonl`; its plans are an example submission, not gold),
and the database tables except flights.

Splits. Seeds (and base training tasks) are the 45 train queries. Evaluation uses the validation
query texts: nothing else is shipped for them, so (1) the structured fields (origin, destination,
days, dates, people, budget, local constraints) are parsed from the query text with
`parse_query` (the same parser reads the train queries, where tests check it against the
reference information), and (2) their reference information is rebuilt from the database the
way the train reference information was (first 20 attractions, every restaurant, accommodations
with house rules, self-driving/taxi for each leg), with a note that no flight data exists. For
5- and 7-day queries the destination is a state and upstream's reference information covers
only the cities its annotators chose, which are unknown; we offer `max_candidate_cities` cities
of that state (chosen by a hash of the task id and the city). Validation plans that fly cannot
have their flights verified: see `travelplanner_checks` for how that is counted.

Reward. Every plan is checked with the 8 commonsense and the applicable hard constraints
(`travelplanner_checks`). `reward` = fraction of the decided checks that pass, with unverifiable
flights counted as failures (a training signal must not pay for unverifiable claims); 0 when no
plan can be read. A success (reward 1.0) is a plan that passes every check, upstream's "final pass".

Metrics (upstream `evaluation/eval.py`). A check is "decided" when it returns True or False; None
(not applicable, or a flight that cannot be verified under `unverifiable_flights="exclude"`) is
left out of every count. Over N evaluated queries:
- delivery_rate     = plans that parse / N;
- commonsense_micro = commonsense checks passed / commonsense checks decided, summed over all N
                      queries (an undelivered plan decides all 8, all failed);
- commonsense_macro = delivered plans with no failed commonsense check / N;
- hard_micro        = hard checks passed / hard checks decided, summed over all N queries (budget
                      always applies, the others when the query sets them; a plan that is
                      undelivered, incomplete or outside the sandbox fails every applicable one);
- hard_macro        = delivered plans with no failed hard check / N;
- final_pass_rate   = delivered plans with no failed check of either kind / N;
- accuracy (the headline) = (commonsense_micro + commonsense_macro + hard_micro + hard_macro) / 4.
The paper's Table 1 reports one TravelPlanner number, the average of the commonsense (CS) and
hard-constraint (HD) pass rates; the benchmark defines each rate micro and macro, so the headline
averages all four (score_micro and score_macro, the CS/HD means of each kind, are reported too).
It is not the final pass rate, which the paper does not report. `score` gives these metrics for
one query (its micro rates are that query's passed / decided, 1.0 when it decides none; `delivered`
and `final_pass` are 0/1) plus the counts; `aggregate` (`aggregate_scores`) gives the corpus values,
whose micro rates are ratios of counts summed over queries. The mean of per-query `accuracy`
(val/accuracy, eval/accuracy) therefore averages per-query micro rates; eval/corpus/accuracy is the
paper's number.

Simulator. It rewrites a seed's query with other people/budget/local constraints; the route
(origin, destination, dates) stays the seed's, so the seed's reference information, flights
included, still applies and every check can run. The environment parses the new query text
itself, checks it against the JSON fields, and rejects variations that cannot be satisfied
(no matching accommodation, cuisine or transport; budget below a lower bound of the cost).
"""
from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import logging
import math
import os
import re
from typing import Any

from genenv_pl.envs.base import DataError, Environment, InvalidTask, Message, Task, read_jsonl, resolve_data_root
from genenv_pl.envs.prompting import check_sim_prompt, success_guide
from genenv_pl.envs.text_metrics import extract_json_object
from genenv_pl.envs.travelplanner_checks import (CUISINES, DATABASE_FILES, HOUSE_RULES, ROOM_TYPES, TRANSPORT_RULES,
                                                 PlanReport, Sandbox, evaluate_plan, parse_plan, to_number)

log = logging.getLogger(__name__)

TRAIN_FILE = "finetuning_data/std_travelplanner.jsonl"
TRAIN_REF_FILE = "database/train_ref_info.jsonl"
VALIDATION_FILE = "postprocess/example_evaluation.jsonl"
VISITING_CITIES = {3: 1, 5: 2, 7: 3}  # upstream's fixed mapping of trip length to cities
NO_FLIGHTS = "The flights table is missing from this offline copy of the benchmark: no flight data is available."

# ---- query text -> structured fields ---------------------------------------------------------
_MONTHS = {m: i for i, m in enumerate(["January", "February", "March", "April", "May", "June", "July", "August",
                                        "September", "October", "November", "December"], 1)}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_NUMBERS = {"one": 1, "single": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10}
_NUM = r"(\d{1,2}|" + "|".join(_NUMBERS) + ")"
_ORG_CUE = re.compile(r"(?:\bfrom|depart(?:ing|s)?|leav(?:e|ing)|start(?:ing|s)?|begin(?:ning|s)?|originating|"
                      r"set(?:ting)? off|taking off|initiating|based)(?:\s+(?:from|in|at|out of))?\s+$", re.I)
_STATE_CUE = re.compile(r"(?:cit(?:y|ies)\s+(?:\w+\s+)?(?:in|within|across|of|throughout)\s+(?:the\s+state\s+of\s+)?"
                        r"|(?:\bto|towards|into)\s+)$", re.I)
_NEGATION = re.compile(r"^(?:not|no|never|avoid|avoiding|without|exclude|excluding|non|rather)$|n't$", re.I)
_FLIGHT_WORDS = re.compile(r"\b(?:flights?|fly|flying|airline|air travel|airplanes?|planes?)\b", re.I)
_DRIVE_WORDS = re.compile(r"\b(?:self[- ]?driv\w*|drive|driving)\b", re.I)


def _num(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _dates(text: str) -> list[dt.date]:
    """Every date mentioned, in order (year from the text, 2022 when absent)."""
    year = int(m.group(1)) if (m := re.search(r"\b(20\d\d)\b", text)) else 2022
    found: list[tuple[int, dt.date]] = []
    for m in re.finditer(_MONTH + r"\s+(\d{1,2})(?:st|nd|rd|th)?\b", text):
        found.append((m.start(), dt.date(year, _MONTHS[m.group(1)], int(m.group(2)))))
        # "March 16th to 22nd" / "between March 9th and 13th": the second day has no month
        tail = re.match(r"(?:st|nd|rd|th)?\s*(?:to|and|through|until|till|-)\s*(?:the\s+)?(\d{1,2})(?:st|nd|rd|th)\b",
                        text[m.end(2):])
        if tail:
            found.append((m.end(2) + tail.start(1), dt.date(year, _MONTHS[m.group(1)], int(tail.group(1)))))
    for m in re.finditer(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+of\s+" + _MONTH, text):
        found.append((m.start(), dt.date(year, _MONTHS[m.group(2)], int(m.group(1)))))
    # "from the 8th to the 10th of March": the first day takes the second one's month
    for m in re.finditer(r"\b(\d{1,2})(?:st|nd|rd|th)\s+(?:to|and|through|until|till|-)\s+(?:the\s+)?\d{1,2}"
                         r"(?:st|nd|rd|th)?\s+of\s+" + _MONTH, text):
        found.append((m.start(), dt.date(year, _MONTHS[m.group(2)], int(m.group(1)))))
    return [d for _, d in sorted(found)]


def _stated_days(text: str) -> int | None:
    if re.search(r"\b(?:a|one)[- ]week\b|\bweek-long\b|\ba week\b", text, re.I):
        return 7
    m = re.search(_NUM + r"[\s-]+days?\b", text, re.I)
    return _num(m.group(1)) if m else None


def _people(text: str) -> int:
    for pattern in (r"\b(?:group|party) of " + _NUM + r"\b",
                    _NUM + r" (?:people|persons|individuals|travell?ers|adults|participants)\b",
                    r"\bfor " + _NUM + r"\b(?![\s-]*(?:days?|nights?|cit(?:y|ies)|weeks?|-day))"):
        m = re.search(pattern, text, re.I)
        if m:
            return _num(m.group(1))
    if re.search(r"\b(?:duo|pair|couple|two of us)\b", text, re.I):
        return 2
    return 1  # "solo", "alone", "for me", or unstated: upstream's easy queries are one person


def _place_pattern(names: set[str]) -> re.Pattern:
    alternatives = sorted(names, key=len, reverse=True)  # longest first: "Kansas City" before "Kansas"
    return re.compile(r"(?<![A-Za-z])(" + "|".join(map(re.escape, alternatives)) + r")(?![A-Za-z])")


def _negated(text: str, start: int, window: int = 5) -> bool:
    words = re.findall(r"[A-Za-z']+", text[:start])[-window:]
    return any(_NEGATION.search(w) for w in words) or bool(re.search(r"non-?\s*$", text[:start], re.I))


def _local_constraints(text: str) -> dict[str, Any]:
    house = []
    for rule, pattern in (("parties", r"\bparties\b|\bparty\b(?!\s+of\b)"), ("smoking", r"\bsmok"),
                          ("children under 10", r"\bchild|\bkids?\b"), ("visitors", r"\bvisitors?\b"),
                          ("pets", r"\bpets?\b")):
        if m := re.search(pattern, text, re.I):
            house.append((m.start(), rule))
    room = None
    if re.search(r"\bprivate rooms?\b", text, re.I):
        room = "private room"
    elif re.search(r"\bentire (?:rooms?|homes?|apartments?|places?|houses?|units?)\b", text, re.I):
        room = "entire room"
    elif shared := [m for m in re.finditer(r"\b(?:un)?shared\b", text, re.I)]:
        # "non-shared", "unshared", "should not be shared", "neither shared nor ..."
        negated = any(m.group(0).lower().startswith("un") or _negated(text, m.start(), window=3) for m in shared)
        room = "not shared room" if negated else "shared room"
    transport = None
    for rule, words in (("no flight", _FLIGHT_WORDS), ("no self-driving", _DRIVE_WORDS)):
        if any(_negated(text, m.start()) for m in words.finditer(text)):
            transport = rule
            break
    cuisines = sorted({m.group(0) for m in re.finditer(r"\b(" + "|".join(CUISINES) + r")\b", text)},
                      key=lambda c: text.index(c))
    return {"house rule": min(house)[1] if house else None, "cuisine": cuisines or None,
            "room type": room, "transportation": transport}


def parse_query(text: str, city_state: dict[str, str], states: set[str]) -> dict[str, Any]:
    """Structured fields of a TravelPlanner query, as in the benchmark's JSON. Raises ValueError."""
    dates = _dates(text)
    if not dates:
        raise ValueError("no dates")
    days = (dates[-1] - dates[0]).days + 1
    stated = _stated_days(text)
    if stated is not None and stated != days:
        raise ValueError(f"the text says {stated} days but the dates span {days}")
    if days not in VISITING_CITIES:
        raise ValueError(f"trips last 3, 5 or 7 days, not {days}")
    budget = re.search(r"\$\s?(\d[\d,]*)", text)
    if not budget:
        raise ValueError("no budget")
    places = [(m.start(), m.end(), m.group(1)) for m in _place_pattern(set(city_state) | states).finditer(text)]
    cities = [p for p in places if p[2] in city_state]
    origin = next((p for p in cities if _ORG_CUE.search(text[:p[0]])), cities[0] if cities else None)
    if origin is None:
        raise ValueError("no origin city")
    others = [p for p in places if p[:2] != origin[:2] and p[2] != origin[2]]
    if days == 3:
        dest = next((p[2] for p in others if p[2] in city_state), None)
    else:
        in_states = [p for p in others if p[2] in states]
        dest = next((p[2] for p in in_states if _STATE_CUE.search(text[:p[0]])),
                    in_states[-1][2] if in_states else None)
    if dest is None:
        raise ValueError("no destination " + ("city" if days == 3 else "state"))
    count = re.search(r"\b(\d+|one|two|three|a solitary|a single|just one|only one)\s+(?:\w+\s+)?cit(?:y|ies)\b",
                      text, re.I)
    if count and _num(count.group(1).split()[-1].lower().replace("solitary", "one")) != VISITING_CITIES[days]:
        raise ValueError(f"a {days}-day trip visits {VISITING_CITIES[days]} cities")
    masked = text
    for start, end, _ in places:  # city names must not trigger constraints ("Indian...", "Mission")
        masked = masked[:start] + " " * (end - start) + masked[end:]
    return {"org": origin[2], "dest": dest, "days": days, "visiting_city_number": VISITING_CITIES[days],
            "date": [(dates[0] + dt.timedelta(days=i)).isoformat() for i in range(days)],
            "people_number": _people(masked), "budget": int(budget.group(1).replace(",", "")),
            "local_constraint": _local_constraints(masked)}


# ---- reference information ------------------------------------------------------------------
_HIDDEN_COLUMNS = {"", "Latitude", "Longitude", "Address", "Phone", "Website"}  # not needed to plan


def render_reference(ref: dict[str, Any]) -> str:
    """Compact text of a reference-information dict: one table per section, ' | '-separated."""
    out = []
    for title, content in ref.items():
        out.append(f"## {title}")
        if isinstance(content, list) and content and isinstance(content[0], dict):
            columns = [c for c in content[0] if c not in _HIDDEN_COLUMNS]
            out.append(" | ".join(columns))
            out += [" | ".join(str(row.get(c, "")) for c in columns) for row in content]
        else:
            out.append(str(content) if content else "No valid information.")
    return "\n".join(out)


def route_legs(ref: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(origin, destination, date) of each flight section, in the reference's (route) order."""
    legs = []
    for key in ref:
        if m := re.match(r"^Flight from (.+) to (.+) on (\d{4}-\d{2}-\d{2})$", key):
            legs.append((m.group(1), m.group(2), m.group(3)))
    return legs


def flight_rows(ref: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Routes the reference has flight data for -> rows (an empty list: known to have no flight)."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for key, content in ref.items():
        if m := re.match(r"^Flight from (.+) to (.+) on \d{4}-\d{2}-\d{2}$", key):
            route = rows.setdefault((m.group(1), m.group(2)), [])
            if isinstance(content, list):  # a string says "There is no flight from A to B on D."
                route.extend(r for r in content if isinstance(r, dict))
    return rows


def _ground(sandbox: Sandbox, origin: str, dest: str, mode: str) -> str:
    row = sandbox.distances.get((origin, dest))
    cost = sandbox.ground_cost(origin, dest, mode)
    if row is None or cost is None:
        return "No valid information."
    return f"{mode}, from {origin} to {dest}, duration: {row['duration']}, distance: {row['distance']}, cost: {cost}"


def build_reference(sandbox: Sandbox, org: str, cities: list[str], max_attractions: int = 20) -> dict[str, Any]:
    """Reference information from the database for a trip from `org` through `cities` (no flights)."""
    ref: dict[str, Any] = {}
    for city in cities:
        ref[f"Attractions in {city}"] = sandbox.rows_by_city["attractions"].get(city, [])[:max_attractions]
        ref[f"Restaurants in {city}"] = sandbox.rows_by_city["restaurants"].get(city, [])
        # upstream's reference information leaves out rows without house rules
        ref[f"Accommodations in {city}"] = [r for r in sandbox.rows_by_city["accommodations"].get(city, [])
                                            if r.get("house_rules")]
    ref["Flights"] = NO_FLIGHTS
    nodes = [org, *cities]
    for a in nodes:
        for b in nodes:
            if a != b and (a == org or b == org or len(cities) > 1):
                ref[f"Self-driving from {a} to {b}"] = _ground(sandbox, a, b, "self-driving")
                ref[f"Taxi from {a} to {b}"] = _ground(sandbox, a, b, "taxi")
    return ref


# ---- prompts --------------------------------------------------------------------------------
_AGENT_SYSTEM = """You are a proficient travel planner. Using only the reference information, write a \
day-by-day plan for the query that a traveller could follow.
Rules: the trip starts at the origin and ends back there on the last day; visit the required number \
of cities; never repeat a restaurant or an attraction; respect the budget (flight prices are per \
person, self-driving cost is per car of 5, taxi per car of 4, meals per person, rooms per night with \
as many rooms as the maximum occupancy requires) and each accommodation's minimum nights; honour \
every preference of the query (house rules, room type, cuisines, transportation); never mix \
self-driving with flights or taxis.
Format: reason briefly inside <think>...</think>, then give the plan inside <response>...</response> \
as a JSON list with one object per day and the keys "days", "current_city", "transportation", \
"breakfast", "attraction", "lunch", "dinner", "accommodation". Write "-" for anything not needed. \
Write each place as "Name, City"; separate attractions with ";". On a travel day current_city is \
"from A to B" and transportation is copied from the reference, e.g. "Flight Number: F0123456, from A \
to B, Departure Time: 08:00, Arrival Time: 10:00" or "Self-driving, from A to B, duration: 2 hours, \
distance: 200 km, cost: 10" or "Taxi, from A to B, duration: ..., distance: ..., cost: ...". No \
accommodation is needed on the last day."""

_SIM_SYSTEM = """You write variations of TravelPlanner queries. A variation keeps the trip's origin, \
destination and dates, and changes the number of travellers, the budget and the local constraints. \
Reply with one JSON object only."""


def _spec_view(spec: dict[str, Any]) -> dict[str, Any]:
    keys = ("org", "dest", "days", "visiting_city_number", "date", "people_number", "budget", "local_constraint")
    return {k: spec[k] for k in keys}


def _rate(passed: float, total: float) -> float:
    return passed / total if total else 1.0  # nothing decided: nothing failed


def headline(cs_micro: float, cs_macro: float, hard_micro: float, hard_macro: float) -> float:
    """The paper's TravelPlanner number: the mean of the commonsense and hard pass rates, micro and macro."""
    return (cs_micro + cs_macro + hard_micro + hard_macro) / 4


def aggregate_scores(scores: list[dict[str, float]]) -> dict[str, float]:
    """Corpus metrics from per-task `score` dicts: micro rates are ratios of summed counts."""
    n = len(scores)
    if n == 0:
        return {}
    total = {k: sum(s[k] for s in scores) for k in scores[0]}
    cs_micro = _rate(total["commonsense_passed"], total["commonsense_total"])
    hard_micro = _rate(total["hard_passed"], total["hard_total"])
    cs_macro, hard_macro = total["commonsense_macro"] / n, total["hard_macro"] / n
    return {"accuracy": headline(cs_micro, cs_macro, hard_micro, hard_macro), "delivery_rate": total["delivered"] / n,
            "commonsense_micro": cs_micro, "commonsense_macro": cs_macro, "hard_micro": hard_micro,
            "hard_macro": hard_macro, "final_pass_rate": total["final_pass"] / n,
            "score_micro": (cs_micro + hard_micro) / 2, "score_macro": (cs_macro + hard_macro) / 2,
            "unverifiable_rate": total["unverifiable"] / n}


class TravelPlannerEnv(Environment):
    name = "travelplanner"
    data_folder = "travelplanner"
    data_source = ("TravelPlanner (github.com/OSU-NLP-Group/TravelPlanner): finetuning_data/std_travelplanner.jsonl, "
                   "postprocess/example_evaluation.jsonl and database/ (train_ref_info.jsonl; the database CSVs were "
                   "removed upstream after commit 958f30d, so take them from that commit)")

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        """The train queries and their reference information, the validation queries and the database
        tables (`DATABASE_FILES`), whatever the arguments."""
        return [TRAIN_FILE, TRAIN_REF_FILE, VALIDATION_FILE, *DATABASE_FILES]

    def aggregate(self, scores: list[dict[str, float]]) -> dict[str, float]:
        return aggregate_scores(scores)

    def __init__(
        self,
        data_root: str | None = None,
        eval_days: tuple[int, ...] | list[int] = (3, 5, 7),
        max_candidate_cities: int = 4,
        max_attractions: int = 20,
        unverifiable_flights: str = "exclude",
        success_threshold: float = 1.0,
        split_salt: str = "genenv-travelplanner",
        max_people: int = 8,
        sim_prompt: str = "stats",
    ):
        """
        Args:
            data_root: folder holding `travelplanner/` (default: $GENENV_DATA_ROOT).
            eval_days: which validation trip lengths to evaluate on (3 = one destination city,
                whose reference information the database reproduces exactly, flights aside).
            max_candidate_cities: cities of the destination state offered for 5/7-day validation queries.
            max_attractions: attractions listed per city (upstream lists 20).
            unverifiable_flights: "exclude" or "fail", how `score` treats a flight that cannot be
                checked (see travelplanner_checks). `reward` always uses "fail".
            success_threshold: reward at which a rollout counts as a success (1.0 = every check).
            split_salt: seeds the choice of candidate cities.
            max_people: largest group a generated query may have.
            sim_prompt: what the simulator's prompt says about the agent's success on the seed:
                "rule" (the rate and "make it harder" above 60%, "easier" below 40%) or "stats" (the
                rate alone); see genenv_pl/envs/prompting.py.
        """
        self.sim_prompt = check_sim_prompt(sim_prompt)
        if unverifiable_flights not in ("exclude", "fail"):
            raise ValueError(f"unverifiable_flights must be 'exclude' or 'fail', got {unverifiable_flights!r}")
        self.root = resolve_data_root(data_root, self.data_folder)
        self.eval_days = tuple(eval_days)
        self.max_candidate_cities = max_candidate_cities
        self.max_attractions = max_attractions
        self.unverifiable_flights = unverifiable_flights
        self.success_threshold = success_threshold
        self.split_salt = split_salt
        self.max_people = max_people
        self.skipped: dict[str, int] = {}
        self.sandbox = Sandbox.load(self.root)
        self._refs: dict[str, dict[str, Any]] = {}
        self._seeds = self._load_train()
        self._eval = [t for t in self._load_validation() if t.data["days"] in self.eval_days]

    # ---- data -------------------------------------------------------------------------
    def _skip(self, where: str, reason: str) -> None:
        log.warning("travelplanner: %s: %s; record skipped", where, reason)
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _read_jsonl(self, rel: str) -> list[tuple[int, Any]]:
        path = os.path.join(self.root, rel)
        if not os.path.isfile(path):
            raise DataError(f"travelplanner: data file {path!r} not found")
        return list(read_jsonl(path, "travelplanner"))

    def _parse(self, query: str) -> dict[str, Any]:
        return parse_query(query, self.sandbox.city_state, self.sandbox.states - {"None"})

    def _load_train(self) -> list[Task]:
        chats, refs = self._read_jsonl(TRAIN_FILE), self._read_jsonl(TRAIN_REF_FILE)
        if len(chats) != len(refs):
            raise DataError(f"travelplanner: {TRAIN_FILE} has {len(chats)} records but {TRAIN_REF_FILE} has "
                            f"{len(refs)}; they are aligned by line")
        tasks = []
        for i, ((lineno, chat), (_, ref)) in enumerate(zip(chats, refs)):
            where = f"{os.path.basename(TRAIN_FILE)}:{lineno}"
            messages = chat.get("messages")
            roles = {m.get("role"): m.get("content") for m in messages if isinstance(m, dict)} if isinstance(
                messages, list) else {}
            user, gold_text = roles.get("user"), roles.get("assistant")
            if not isinstance(user, str) or "Query:" not in user:
                self._skip(where, "missing field 'query'")
                continue
            if not isinstance(gold_text, str):
                self._skip(where, "missing field 'plan'")
                continue
            query = " ".join(user.rsplit("Query:", 1)[1].split())
            try:
                spec = self._parse(query)
                gold = ast.literal_eval(gold_text)  # our own data file (the benchmark writes Python literals)
            except (ValueError, SyntaxError) as err:
                self._skip(where, f"unparseable query or plan ({err})")
                continue
            legs = route_legs(ref)
            if not legs or legs[0][0] != spec["org"] or not any(k.startswith("Attractions in ") for k in ref):
                self._skip(where, "reference information does not match the query")
                continue
            ref_id = f"train-{i}"
            self._refs[ref_id] = ref
            tasks.append(self._task(f"travelplanner-{ref_id}", query, spec, ref_id, "train",
                                    meta={"gold_plan": [d for d in gold if d]}))
        return tasks

    def _load_validation(self) -> list[Task]:
        tasks = []
        for lineno, row in self._read_jsonl(VALIDATION_FILE):
            where = f"{os.path.basename(VALIDATION_FILE)}:{lineno}"
            idx, query = row.get("idx"), row.get("query")
            if not isinstance(idx, int):
                self._skip(where, "missing field 'idx'")
                continue
            if not isinstance(query, str) or not query.strip():
                self._skip(where, "missing field 'query'")
                continue
            try:
                spec = self._parse(query)
            except ValueError as err:
                self._skip(where, f"unparseable query ({err})")
                continue
            tasks.append(self._task(f"travelplanner-val-{idx}", " ".join(query.split()), spec, f"val-{idx}",
                                    "validation"))
        return tasks

    def _task(self, task_id: str, query: str, spec: dict[str, Any], ref_id: str, split: str,
              meta: dict[str, Any] | None = None) -> Task:
        n_constraints = sum(1 for v in spec["local_constraint"].values() if v)
        return Task(id=task_id, data={"query": query, **spec, "ref_id": ref_id}, difficulty=float(n_constraints),
                    group=f"{spec['days']}-day", meta={"split": split, **(meta or {})})

    def reference(self, task: Task) -> dict[str, Any]:
        """The task's reference information (train: shipped; validation: rebuilt, cached)."""
        ref_id = task.data["ref_id"]
        if ref_id not in self._refs:
            if not ref_id.startswith("val-"):
                raise KeyError(f"unknown reference information {ref_id!r}")
            self._refs[ref_id] = build_reference(self.sandbox, task.data["org"], self._stay_cities(task),
                                                 self.max_attractions)
        return self._refs[ref_id]

    def _stay_cities(self, task: Task) -> list[str]:
        if task.data["days"] == 3:
            return [task.data["dest"]]
        db = self.sandbox.rows_by_city
        candidates = [c for c, s in self.sandbox.city_state.items() if s == task.data["dest"] and c != task.data["org"]
                      and all(db[k].get(c) for k in ("attractions", "restaurants", "accommodations"))]
        # a stable pseudo-random order per task: the same cities on every machine and run
        candidates.sort(key=lambda c: hashlib.sha256(f"{self.split_salt}:{task.data['ref_id']}:{c}".encode()).digest())
        return candidates[: max(self.max_candidate_cities, task.data["visiting_city_number"])]

    def seed_tasks(self) -> list[Task]:
        return list(self._seeds)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    def task_key(self, task: Task) -> str:
        # The checks see the structured fields only: two wordings of one spec are one task.
        return json.dumps({**_spec_view(task.data), "ref_id": task.data["ref_id"]}, sort_keys=True)

    # ---- agent side ---------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        user = f"Reference information:\n{render_reference(self.reference(task))}\n\nQuery: {task.data['query']}"
        return [{"role": "system", "content": _AGENT_SYSTEM}, {"role": "user", "content": user}]

    def check(self, task: Task, response: str, unverifiable: str | None = None) -> PlanReport:
        """Every check's outcome (and reasons) for one response: the detail behind reward/score."""
        return evaluate_plan(_spec_view(task.data), parse_plan(response), self.sandbox,
                             flight_rows(self.reference(task)), unverifiable or self.unverifiable_flights)

    def reward(self, task: Task, response: str) -> float:
        counts = self.check(task, response, unverifiable="fail").counts()
        total = counts["commonsense_total"] + counts["hard_total"]
        return (counts["commonsense_passed"] + counts["hard_passed"]) / total if total else 0.0

    def score(self, task: Task, response: str) -> dict[str, float]:
        """The module docstring's metrics for one response (see there), plus the check counts."""
        report = self.check(task, response)
        counts = report.counts()
        cs = _rate(counts["commonsense_passed"], counts["commonsense_total"])
        hard = _rate(counts["hard_passed"], counts["hard_total"])
        cs_macro = float(report.delivered and False not in report.commonsense.values())
        hard_macro = float(report.delivered and False not in report.hard.values())
        return {"accuracy": headline(cs, cs_macro, hard, hard_macro), "delivered": float(report.delivered),
                "format_error": float(not report.delivered), "commonsense_micro": cs, "commonsense_macro": cs_macro,
                "hard_micro": hard, "hard_macro": hard_macro, "final_pass": float(report.final_pass),
                "score_micro": (cs + hard) / 2, "score_macro": (cs_macro + hard_macro) / 2,
                "unverifiable": float(bool(report.unverifiable)), **{k: float(v) for k, v in counts.items()}}

    # ---- simulator side -----------------------------------------------------------------
    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        aim = success_guide(
            success_rate, self.sim_prompt, stat="The agent satisfies {rate} of such queries",
            harder="make it harder (a tighter but feasible budget, more travellers, more local constraints).",
            easier="make it easier (a looser budget, fewer travellers or constraints).",
            unknown="Keep the difficulty similar.")
        spec = _spec_view(seed.data)
        user = (
            f"Seed query: {seed.data['query']}\nIts fields: {json.dumps(spec)}\n\n"
            f"Write a new query for the same trip ({spec['org']} to {spec['dest']}, {spec['days']} days, "
            f"{spec['date'][0]} to {spec['date'][-1]}). {aim}\n"
            f"Allowed values: people_number 1-{self.max_people}; house rule one of {sorted(HOUSE_RULES)}; "
            f"room type one of {sorted(ROOM_TYPES)}; cuisine a list from {list(CUISINES)}; transportation one "
            f"of {list(TRANSPORT_RULES)}; null when unused. The query must state the dates, the budget in "
            "dollars, the number of travellers and every constraint in plain words.\n"
            'Reply with JSON only: {"query": "...", "people_number": 2, "budget": 2500, "local_constraint": '
            '{"house rule": null, "cuisine": null, "room type": null, "transportation": null}}'
        )
        return [{"role": "system", "content": _SIM_SYSTEM}, {"role": "user", "content": user}]

    def parse_task(self, text: str, seed: Task) -> Task:
        obj = extract_json_object(text)
        if obj is None:
            raise InvalidTask("unparseable", "no JSON object")
        query = obj.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InvalidTask("missing_field", "query")
        query = " ".join(query.split())
        try:
            spec = self._parse(query)
        except ValueError as err:
            raise InvalidTask("unparseable_query", str(err)) from None
        route = ("org", "dest", "days", "date")
        if any(spec[k] != seed.data[k] for k in route):
            raise InvalidTask("changed_route", "origin, destination and dates must stay the seed's")
        self._check_fields(obj, spec)
        if not 1 <= spec["people_number"] <= self.max_people:
            raise InvalidTask("bad_people", str(spec["people_number"]))
        if _spec_view(spec) == _spec_view(seed.data):
            raise InvalidTask("copy_of_seed")
        self._check_feasible(spec, seed)
        digest = hashlib.sha1(json.dumps(_spec_view(spec), sort_keys=True).encode()).hexdigest()[:12]
        task = self._task(f"{seed.id}/gen-{digest}", query, spec, seed.data["ref_id"], "generated",
                          meta={"seed_id": seed.id})
        task.group = "generated"
        return task

    @staticmethod
    def _check_fields(obj: dict[str, Any], spec: dict[str, Any]) -> None:
        """JSON fields, where given, must say what the query text says (the agent reads the text)."""
        for key in ("people_number", "budget"):
            if key in obj and obj[key] != spec[key]:
                raise InvalidTask("inconsistent_fields", f"{key}: JSON {obj[key]!r}, text {spec[key]!r}")
        given = obj.get("local_constraint")
        if given is None:
            return
        if not isinstance(given, dict):
            raise InvalidTask("inconsistent_fields", "local_constraint must be an object")
        for key, parsed in spec["local_constraint"].items():
            value = given.get(key)
            if key == "cuisine":
                value = sorted(value, key=str) if isinstance(value, list) and value else None
                parsed = sorted(parsed) if parsed else None
            allowed = {"house rule": HOUSE_RULES, "room type": ROOM_TYPES, "transportation": TRANSPORT_RULES}
            if key in allowed and value is not None and (not isinstance(value, str) or value not in allowed[key]):
                raise InvalidTask("bad_constraint", f"{key}: {value!r}")
            if value != parsed:
                raise InvalidTask("inconsistent_fields", f"{key}: JSON {value!r}, text {parsed!r}")

    def _check_feasible(self, spec: dict[str, Any], seed: Task) -> None:
        """Reject variations no plan can satisfy, with a lower bound of the cheapest plan's cost."""
        ref, sandbox, people = self.reference(seed), self.sandbox, spec["people_number"]
        lc = spec["local_constraint"]
        legs = route_legs(ref)
        stays = list(dict.fromkeys(b for _, b, _ in legs[:-1])) or [spec["dest"]]
        flights = flight_rows(ref)
        cost = 0.0
        for a, b, _ in legs:
            options = []
            if lc["transportation"] != "no flight":
                options += [p * people for r in flights.get((a, b), []) if (p := to_number(r.get("Price"))) is not None]
            drive = sandbox.ground_cost(a, b, "self-driving")
            if lc["transportation"] != "no self-driving" and drive is not None:
                options.append(drive * math.ceil(people / 5))
            if (c := sandbox.ground_cost(a, b, "taxi")) is not None:
                options.append(c * math.ceil(people / 4))
            if not options:
                raise InvalidTask("infeasible_constraint", f"no allowed transport from {a} to {b}")
            cost += min(options)
        rooms = []
        for city in stays:
            fits = [r for r in sandbox.rows_by_city["accommodations"].get(city, [])
                    if not (lc["house rule"] and HOUSE_RULES[lc["house rule"]] in r.get("house_rules", ""))
                    and _room_ok(lc["room type"], r.get("room type", ""))]
            if not fits:
                raise InvalidTask("infeasible_constraint", f"no accommodation in {city} fits")
            rooms.append(min((to_number(r["price"]) or 0.0) * math.ceil(people / max(to_number(r["maximum occupancy"])
                                                                                      or 1.0, 1.0)) for r in fits))
        cost += (spec["days"] - 1) * min(rooms)
        restaurants = [r for city in stays for r in sandbox.rows_by_city["restaurants"].get(city, [])]
        for wanted in lc["cuisine"] or []:
            if not any(wanted in r["Cuisines"] for r in restaurants):
                raise InvalidTask("infeasible_constraint", f"no {wanted} restaurant")
        meals = 3 * max(spec["days"] - len(legs), 0)  # non-travel days need all three meals
        cost += sum(sorted(to_number(r["Average Cost"]) or 0.0 for r in restaurants)[:meals]) * people
        if spec["budget"] < cost:
            raise InvalidTask("infeasible_budget", f"budget {spec['budget']} < lower bound {cost:.0f}")


def _room_ok(wanted: str | None, kind: str) -> bool:
    if wanted is None:
        return True
    if wanted == "not shared room":
        return kind != "Shared room"
    return kind == ROOM_TYPES[wanted]
