"""TravelPlanner scorer: the sandbox database, plan parsing and the constraint checks.

The checks follow the official evaluation (OSU-NLP-Group/TravelPlanner, `evaluation/
commonsense_constraint.py` and `hard_constraint.py`), re-implemented without pandas:

commonsense (8): within_sandbox, complete_info, within_current_city, reasonable_city_route,
    diverse_restaurants, diverse_attractions, non_conflicting_transport, valid_accommodation
    (minimum nights);
hard (5): budget, room_rule, room_type, cuisine, transportation. A hard check whose constraint
    the query does not set is `None` (not applicable), as upstream.

Each check returns True / False / None; None means "not applicable or cannot be decided here"
and is left out of every denominator. As upstream, hard checks only run on plans that were
delivered, are complete and stay in the sandbox; otherwise the applicable hard checks fail.

The flights table is missing from the shipped data (see the benchmark's SOURCE.md). A flight is
checked against the flight rows carried by the task's own reference information (the train
queries carry the rows for their route and dates). A flight on a route the task has no rows for
cannot be verified; `unverifiable="exclude"` leaves within_sandbox undecided (None) when nothing
else fails and makes budget None unless the known costs alone already exceed it;
`unverifiable="fail"` counts the flight as outside the sandbox and its price as unknown (budget
fails). Both are reported in `PlanReport.unverifiable`.

Deliberate deviations from upstream (each closes a loophole a trained policy would find):
- names must match a database row exactly (case and whitespace aside) in the stated city;
  upstream accepts any row whose name *contains* the text, so "a, Rockford" would pass;
- meals, attractions and accommodation must name a city of the day (upstream: substring);
- attractions are split on ";" keeping the last item (upstream drops the last piece, which
  is only right with a trailing ";");
- an unknown transport mode fails within_sandbox (upstream lets it through);
- a trailing "; Cost: ..." after a meal or accommodation is ignored (prices come from the
  database), where upstream fails the entry as unknown;
- the house rule "parties" is enforced (upstream checks a misspelt "parities", never matching);
- a meal in the origin city is skipped for the cuisine check without skipping the rest of
  the day (upstream's `continue` skips the day's later meals).
"""
from __future__ import annotations

import ast
import csv
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from genenv_pl.envs.base import DataError
from genenv_pl.envs.text_metrics import extract_tag, strip_tag_blocks

COMMONSENSE = ("within_sandbox", "complete_info", "within_current_city", "reasonable_city_route",
               "diverse_restaurants", "diverse_attractions", "non_conflicting_transport", "valid_accommodation")
HARD = ("budget", "room_rule", "room_type", "cuisine", "transportation")
PLAN_FIELDS = ("transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
MEALS = ("breakfast", "lunch", "dinner")
HOUSE_RULES = {"smoking": "No smoking", "parties": "No parties", "children under 10": "No children under 10",
               "visitors": "No visitors", "pets": "No pets"}
ROOM_TYPES = {"entire room": "Entire home/apt", "private room": "Private room", "shared room": "Shared room",
              "not shared room": None}
TRANSPORT_RULES = ("no flight", "no self-driving")
CUISINES = ("Chinese", "American", "Italian", "Mexican", "Indian", "Mediterranean", "French")
NOT_NEEDED = "You don't need to fill in the information for this or later days."
_MAX_PLAN_CHARS = 60_000  # longer model output is cut before parsing: bounded cost
_MAX_STARTS = 64  # JSON decoding attempts per text


def norm(text: str) -> str:
    """Comparison form of a name: case-folded, whitespace collapsed."""
    return " ".join(str(text).split()).casefold()


def before_paren(text: str) -> str:
    """'Helena(Montana)' -> 'Helena' (the benchmark writes state-trip cities this way)."""
    m = re.match(r"^(.*?)\([^)]*\)", text)
    return (m.group(1) if m else text).strip()


def name_city(entry: str) -> tuple[str, str]:
    """'Name, with, commas, City(State)' -> ('Name, with, commas', 'City'); no comma -> (entry, '')."""
    head, sep, tail = entry.rpartition(",")
    if not sep:
        return entry.strip(), ""
    return head.strip(), before_paren(tail.strip())


def from_to(text: str) -> tuple[str | None, str | None]:
    """'... from A to B, ...' -> (A, B) with any '(State)' removed; (None, None) if absent."""
    m = re.search(r"from\s+(.+?)\s+to\s+([^,]+)(?=[,\s]|$)", text)
    if not m:
        return None, None
    return before_paren(m.group(1).strip()), before_paren(m.group(2).strip())


def attraction_items(value: str) -> list[str]:
    return [a.strip() for a in value.split(";") if a.strip() and a.strip() != "-"]


def filled(value: str | None) -> bool:
    return bool(value) and value.strip() not in ("", "-")


def transport_mode(value: str) -> str | None:
    low = value.lower()
    if "taxi" in low:
        return "taxi"
    if "self-driving" in low:
        return "self-driving"
    if "flight" in low:
        return "flight"
    return None


def flight_number(value: str) -> str | None:
    m = re.search(r"flight number:\s*(F\d+)\b", value, flags=re.IGNORECASE)  # the benchmark's F0123456
    return m.group(1).upper() if m else None


# ---- the database ------------------------------------------------------------------------
# The tables `Sandbox.load` reads, relative to the benchmark folder (the layout of its repository)
RESTAURANTS_FILE = "database/restaurants/clean_restaurant_2022.csv"
ATTRACTIONS_FILE = "database/attractions/attractions.csv"
ACCOMMODATIONS_FILE = "database/accommodations/clean_accommodations_2022.csv"
DISTANCES_FILE = "database/googleDistanceMatrix/distance.csv"
CITIES_FILE = "database/background/citySet_with_states.txt"
DATABASE_FILES = (RESTAURANTS_FILE, ATTRACTIONS_FILE, ACCOMMODATIONS_FILE, DISTANCES_FILE, CITIES_FILE)


def _read_csv(path: str, required: Iterable[str]) -> list[dict[str, str]]:
    if not os.path.isfile(path):
        raise DataError(f"travelplanner: database file {path!r} not found")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"travelplanner: {path}: missing column(s) {missing}")
            return list(reader)
    except (csv.Error, UnicodeDecodeError) as err:
        raise DataError(f"travelplanner: {path}: unreadable CSV ({err})") from None


def to_number(text: Any) -> float | None:
    """A float from "1,433" / "2.0" / 474; None when it is not a number."""
    try:
        return float(str(text).replace(",", "").strip())
    except (TypeError, ValueError):
        return None


@dataclass
class Sandbox:
    """The shipped database tables, indexed by (city, name) for exact lookups."""

    restaurants: dict[str, dict[str, list[dict[str, str]]]]  # city -> norm(name) -> rows
    attractions: dict[str, dict[str, list[dict[str, str]]]]
    accommodations: dict[str, dict[str, list[dict[str, str]]]]
    distances: dict[tuple[str, str], dict[str, str]]  # (origin, destination) -> first row
    city_state: dict[str, str]
    states: set[str]
    rows_by_city: dict[str, dict[str, list[dict[str, str]]]] = field(default_factory=dict)  # kind -> city -> rows

    @classmethod
    def load(cls, root: str) -> "Sandbox":
        """Read `<root>/database/...` (the folder layout of the benchmark's repository): `DATABASE_FILES`."""
        tables = {
            "restaurants": (_read_csv(os.path.join(root, RESTAURANTS_FILE),
                                      ("Name", "City", "Cuisines", "Average Cost")), "Name", "City"),
            "attractions": (_read_csv(os.path.join(root, ATTRACTIONS_FILE), ("Name", "City")),
                            "Name", "City"),
            "accommodations": (_read_csv(os.path.join(root, ACCOMMODATIONS_FILE),
                                         ("NAME", "room type", "price", "minimum nights", "house_rules",
                                          "maximum occupancy", "city")), "NAME", "city"),
        }
        indexed, by_city = {}, {}
        for kind, (rows, name_col, city_col) in tables.items():
            index: dict[str, dict[str, list[dict[str, str]]]] = {}
            cities: dict[str, list[dict[str, str]]] = {}
            for row in rows:
                index.setdefault(row[city_col], {}).setdefault(norm(row[name_col]), []).append(row)
                cities.setdefault(row[city_col], []).append(row)
            indexed[kind], by_city[kind] = index, cities
        distances: dict[tuple[str, str], dict[str, str]] = {}
        for row in _read_csv(os.path.join(root, DISTANCES_FILE),
                             ("origin", "destination", "duration", "distance")):
            distances.setdefault((row["origin"], row["destination"]), row)  # upstream uses the first row
        city_state = {}
        path = os.path.join(root, CITIES_FILE)
        if not os.path.isfile(path):
            raise DataError(f"travelplanner: background file {path!r} not found")
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    city, tab, state = line.rstrip("\n").partition("\t")
                    if not tab:
                        raise DataError(f"travelplanner: {path}:{lineno}: expected 'city<TAB>state'")
                    city_state[city.strip()] = state.strip()
        return cls(indexed["restaurants"], indexed["attractions"], indexed["accommodations"], distances,
                   city_state, set(city_state.values()), by_city)

    def find(self, kind: str, entry: str) -> dict[str, str] | None:
        """The first row of `kind` whose name and city match 'Name, City' exactly, or None."""
        name, city = name_city(entry)
        rows = getattr(self, kind).get(city, {}).get(norm(name))
        return rows[0] if rows else None

    def ground_cost(self, origin: str, dest: str, mode: str) -> int | None:
        """Upstream's cost of one car (self-driving: 0.05/km) or taxi (1/km); None when invalid."""
        row = self.distances.get((origin, dest))
        if row is None or not row.get("duration") or "day" in row["duration"]:
            return None
        km = to_number(row.get("distance", "").replace("km", ""))
        if km is None:
            return None
        return int(km * 0.05) if mode == "self-driving" else int(km)


# ---- plan parsing -------------------------------------------------------------------------
_KEY_ALIASES = {"day": "days", "days": "days", "current_city": "current_city", "city": "current_city",
                "transportation": "transportation", "transport": "transportation", "breakfast": "breakfast",
                "attraction": "attraction", "attractions": "attraction", "lunch": "lunch", "dinner": "dinner",
                "accommodation": "accommodation", "accommodations": "accommodation"}


def _nesting_depth(text: str) -> int:
    depth = best = 0
    for ch in text:
        if ch in "[{(":
            depth += 1
            best = max(best, depth)
        elif ch in "]})":
            depth -= 1
    return best


def _normalize_day(raw: Any) -> dict[str, str] | None:
    if not isinstance(raw, dict):
        return None
    day: dict[str, str] = {}
    for key, value in raw.items():
        canon = _KEY_ALIASES.get(re.sub(r"[\s\-]+", "_", str(key).strip().lower()))
        if canon is None:
            continue
        if isinstance(value, list):  # e.g. attractions given as a list
            value = ";".join(str(v) for v in value)
        day[canon] = "" if value is None else " ".join(str(value).split())
        if canon in (*MEALS, "accommodation"):  # "Name, City; Cost: 14": costs come from the database
            day[canon] = re.sub(r"\s*[;,]\s*cost\s*:.*$", "", day[canon], flags=re.IGNORECASE)
    return day


def _as_plan(value: Any) -> list[dict[str, str]] | None:
    if isinstance(value, dict):
        value = value.get("plan")
    if not isinstance(value, list):
        return None
    days = [_normalize_day(v) for v in value]
    if not days or any(d is None for d in days) or not any(days):
        return None
    while days and not days[-1]:  # the benchmark pads plans with empty days
        days.pop()
    return days  # type: ignore[return-value]


def _literal_plans(text: str) -> Iterable[Any]:
    """JSON values, then Python literals (the benchmark's own gold format), that start at '['/'{'."""
    decoder = json.JSONDecoder()
    for n, m in enumerate(re.finditer(r"[\[{]", text)):
        if n >= _MAX_STARTS:  # each attempt may scan to the end: bound the work on bracket soup
            break
        try:
            yield decoder.raw_decode(text, m.start())[0]
        except (ValueError, RecursionError):
            continue
    start, end = text.find("["), text.rfind("]")
    # literal_eval builds literals only (no code runs); the depth cap keeps it off deep recursion.
    if 0 <= start < end and _nesting_depth(text[start:end + 1]) <= 8:
        try:
            yield ast.literal_eval(text[start:end + 1])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass


def _text_plan(text: str) -> list[dict[str, str]] | None:
    """The planner's text format: 'Day 1:' then 'Current City: ...', 'Transportation: ...' lines."""
    parts = re.split(r"(?im)^\s*\**\s*day\s*(\d+)\s*\**\s*:?\s*\**\s*$", text)
    if len(parts) < 3:
        return None
    plan = []
    for number, body in zip(parts[1::2], parts[2::2]):
        day: dict[str, str] = {"days": number}
        for line in body.splitlines():
            m = re.match(r"^\s*[-*]?\s*\**([A-Za-z _]+?)\**\s*:\s*(.*)$", line)
            if m:
                canon = _KEY_ALIASES.get(re.sub(r"\s+", "_", m.group(1).strip().lower()))
                if canon:
                    day[canon] = " ".join(m.group(2).split())
        plan.append(day)
    return plan if any(len(d) > 1 for d in plan) else None


def parse_plan(text: str) -> list[dict[str, str]] | None:
    """A plan (list of per-day dicts with canonical keys) from model output, or None. Never raises.

    Reads `<response>` when present (else the text outside `<think>`), then tries a JSON list of
    days, a Python-literal list (the benchmark's gold format) and the 'Day 1:' text format.
    """
    text = (text or "")[:_MAX_PLAN_CHARS]
    body = extract_tag(text, "response")
    if body is None:
        body = strip_tag_blocks(text, "think")
    for value in _literal_plans(body):
        plan = _as_plan(value)
        if plan:
            return plan
    return _text_plan(body)


# ---- the checks ---------------------------------------------------------------------------
Result = tuple[bool | None, str | None]


@dataclass
class CheckContext:
    """What a plan is checked against: the database plus the task's own flight rows."""

    spec: dict[str, Any]  # org, dest, days, visiting_city_number, people_number, budget, local_constraint
    sandbox: Sandbox
    flights: dict[tuple[str, str], list[dict[str, Any]]]  # routes the task has flight data for
    unverifiable: str = "exclude"  # or "fail"
    unverified: list[str] = field(default_factory=list)

    def flight_row(self, value: str, current_city: str) -> tuple[str, dict[str, Any] | None]:
        """('ok' | 'invalid' | 'unverifiable', row) for a flight entry."""
        origin, dest = from_to(value)
        if origin is None:
            origin, dest = from_to(current_city)
        number = flight_number(value)
        if origin is None or number is None:
            return "invalid", None
        if (origin, dest) not in self.flights:
            return "unverifiable", None
        for row in self.flights[(origin, dest)]:
            if str(row.get("Flight Number", "")).upper() == number:
                return "ok", row
        return "invalid", None


def _days(ctx: CheckContext, plan: list[dict[str, str]]) -> list[dict[str, str]]:
    return plan[: ctx.spec["days"]]


def _cities_of(current_city: str) -> list[str]:
    if "from" in current_city:
        a, b = from_to(current_city)
        return [c for c in (a, b) if c]
    return [before_paren(current_city)]


def within_sandbox(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    unverifiable = False
    for i, day in enumerate(_days(ctx, plan), 1):
        value = day.get("transportation", "")
        if filled(value):
            mode = transport_mode(value)
            if mode == "flight":
                status, _ = ctx.flight_row(value, day.get("current_city", ""))
                if status == "invalid":
                    return False, f"day {i}: flight not in the sandbox"
                if status == "unverifiable":
                    unverifiable = True
                    ctx.unverified.append(f"day {i}: {value}")
            elif mode in ("self-driving", "taxi"):
                origin, dest = from_to(value)
                if origin is None:
                    origin, dest = from_to(day.get("current_city", ""))
                if origin is None or ctx.sandbox.ground_cost(origin, dest, mode) is None:
                    return False, f"day {i}: {mode} route not in the sandbox"
            else:
                return False, f"day {i}: unknown transport mode"
        for meal in MEALS:
            if filled(day.get(meal)) and ctx.sandbox.find("restaurants", day[meal]) is None:
                return False, f"day {i}: {meal} not in the sandbox"
        for item in attraction_items(day.get("attraction", "")):
            if ctx.sandbox.find("attractions", item) is None:
                return False, f"day {i}: attraction {item!r} not in the sandbox"
        if filled(day.get("accommodation")) and ctx.sandbox.find("accommodations", day["accommodation"]) is None:
            return False, f"day {i}: accommodation not in the sandbox"
    if unverifiable:
        return (None if ctx.unverifiable == "exclude" else False), "flight cannot be verified (no flights table)"
    return True, None


def complete_info(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    days, spec = _days(ctx, plan), ctx.spec
    real = [d for d in days if d and d.get("current_city") != NOT_NEEDED]
    if len(real) != spec["days"]:
        return False, f"the plan should have {spec['days']} days"
    cities: set[str] = set()
    for i, day in enumerate(days):
        cc = day.get("current_city", "")
        if "from" in cc:
            a, b = from_to(cc)
            if i == 0 and a != spec["org"]:
                return False, f"the first day should start from {spec['org']}"
            cities.update(c for c in (a, b) if c)
        else:
            cities.add(before_paren(cc))
    cities.discard(spec["org"])
    if len(cities) != spec["visiting_city_number"]:
        return False, f"the plan should visit {spec['visiting_city_number']} cities"
    valid_info = 0
    for i, day in enumerate(days):
        missing = [k for k in PLAN_FIELDS if k not in day]
        if missing:
            return False, f"day {i + 1}: no {missing[0]}"
        cc = day.get("current_city", "")
        travel = "from " in cc or "to " in cc
        if travel and not filled(day["transportation"]):
            return False, f"day {i + 1}: travel day without transportation"
        if "from " not in cc and " to " not in cc and not filled(day["attraction"]):
            return False, f"day {i + 1}: no attraction"
        if i != spec["days"] - 1 and not filled(day["accommodation"]):
            return False, f"day {i + 1}: no accommodation"
        if "from " not in cc and not all(filled(day[m]) for m in MEALS):
            return False, f"day {i + 1}: a meal is missing"
        valid_info += sum(1 for v in day.values() if filled(v))
    if valid_info / (6 * spec["days"]) < 0.5:
        return False, "more than half of the information is absent"
    return True, None


def within_current_city(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    for i, day in enumerate(_days(ctx, plan), 1):
        cities = _cities_of(day.get("current_city", ""))
        if not cities:
            return False, f"day {i}: no current city"
        if filled(day.get("transportation")) and not all(c in day["transportation"] for c in cities):
            return False, f"day {i}: transportation does not match the current city"
        for meal in MEALS:
            if filled(day.get(meal)) and name_city(day[meal])[1] not in cities:
                return False, f"day {i}: {meal} is not in the current city"
        for item in attraction_items(day.get("attraction", "")):
            if name_city(item)[1] not in cities:
                return False, f"day {i}: attraction {item!r} is not in the current city"
        if filled(day.get("accommodation")) and name_city(day["accommodation"])[1] != cities[-1]:
            return False, f"day {i}: accommodation is not in the day's last city"
    return True, None


def _valid_city_sequence(cities: list[str]) -> bool:
    """Each city between the first and last appears in one consecutive run of at least 2."""
    if len(cities) < 3:
        return False
    visited: set[str] = set()
    i = 0
    while i < len(cities):
        city = cities[i]
        if city in visited and i not in (0, len(cities) - 1):
            return False
        count = 0
        while i < len(cities) and cities[i] == city:
            count += 1
            i += 1
        if count == 1 and 0 < i - 1 < len(cities) - 1:
            return False
        visited.add(city)
    return True


def reasonable_city_route(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    spec, route = ctx.spec, []
    for i, day in enumerate(_days(ctx, plan)):
        cc = day.get("current_city", "")
        if "from" in cc:
            a, b = from_to(cc)
            if a is None:
                return False, f"day {i + 1}: unreadable 'from A to B'"
            if i == 0 and a != spec["org"]:
                return False, f"the first day should start from {spec['org']}"
            route += [a, b]
        else:
            route.append(before_paren(cc))
    if not route or route[0] != route[-1]:
        return False, "the trip should be a closed circle"
    if not _valid_city_sequence(route):
        return False, "the city sequence is invalid"
    for idx, city in enumerate(route):
        if city not in ctx.sandbox.city_state:
            return False, f"{city} is not a valid city"
        if 0 < idx < len(route) - 1 and spec["days"] > 3 and ctx.sandbox.city_state[city] != spec["dest"]:
            return False, f"{city} is not in {spec['dest']}"
    return True, None


def diverse_restaurants(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    seen: set[str] = set()
    for i, day in enumerate(_days(ctx, plan), 1):
        for meal in MEALS:
            if filled(day.get(meal)):
                if norm(day[meal]) in seen:
                    return False, f"day {i}: {meal} repeats a restaurant"
                seen.add(norm(day[meal]))
    return True, None


def diverse_attractions(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    seen: set[str] = set()
    for i, day in enumerate(_days(ctx, plan), 1):
        for item in attraction_items(day.get("attraction", "")):
            if norm(item) in seen:
                return False, f"day {i}: attraction {item!r} is repeated"
            seen.add(norm(item))
    return True, None


def non_conflicting_transport(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    days = _days(ctx, plan)
    if not days or not filled(days[0].get("transportation")):
        return False, "day 1 needs transportation"
    modes = {transport_mode(d["transportation"]) for d in days if filled(d.get("transportation"))}
    if {"self-driving", "flight"} <= modes or {"self-driving", "taxi"} <= modes:
        return False, "self-driving cannot be mixed with flights or taxis"
    return True, None


def valid_accommodation(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    runs: list[list[Any]] = []
    for i, day in enumerate(_days(ctx, plan), 1):
        if "accommodation" not in day:
            return False, f"day {i}: no accommodation"
        value = norm(day["accommodation"])
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1, day["accommodation"]])
    for value, nights, raw in runs:
        if value in ("", "-"):
            continue
        row = ctx.sandbox.find("accommodations", raw)
        min_nights = to_number(row["minimum nights"]) if row else None
        if min_nights is not None and nights < min_nights:
            return False, f"{raw!r} needs at least {int(min_nights)} nights"
    return True, None


def plan_cost(ctx: CheckContext, plan: list[dict[str, str]]) -> tuple[float, bool]:
    """(cost of the known items, whether every priced item was known), upstream's cost model."""
    people, total, complete = ctx.spec["people_number"], 0.0, True
    for day in _days(ctx, plan):
        value = day.get("transportation", "")
        if filled(value):
            mode = transport_mode(value)
            if mode == "flight":
                status, row = ctx.flight_row(value, day.get("current_city", ""))
                price = to_number(row.get("Price", "")) if row else None
                if price is None:
                    complete = False
                else:
                    total += price * people
            elif mode in ("self-driving", "taxi"):
                origin, dest = from_to(value)
                if origin is None:
                    origin, dest = from_to(day.get("current_city", ""))
                cost = ctx.sandbox.ground_cost(origin, dest, mode) if origin else None
                if cost is not None:
                    total += cost * math.ceil(people / (5 if mode == "self-driving" else 4))
        for meal in MEALS:
            row = ctx.sandbox.find("restaurants", day[meal]) if filled(day.get(meal)) else None
            if row:
                total += (to_number(row["Average Cost"]) or 0.0) * people
        row = ctx.sandbox.find("accommodations", day["accommodation"]) if filled(day.get("accommodation")) else None
        if row:
            occupancy = to_number(row["maximum occupancy"]) or 1.0
            total += (to_number(row["price"]) or 0.0) * math.ceil(people / max(occupancy, 1.0))
    return total, complete


def budget(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    cost, complete = plan_cost(ctx, plan)
    if cost > ctx.spec["budget"]:
        return False, f"cost {cost:.0f} exceeds the budget {ctx.spec['budget']}"
    if not complete:
        return (None if ctx.unverifiable == "exclude" else False), "a flight price is unknown"
    return True, None


def _accommodation_rows(ctx: CheckContext, plan: list[dict[str, str]]) -> list[dict[str, str]]:
    rows = [ctx.sandbox.find("accommodations", d["accommodation"])
            for d in _days(ctx, plan) if filled(d.get("accommodation"))]
    return [r for r in rows if r]


def room_rule(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    rule = ctx.spec["local_constraint"].get("house rule")
    if not rule:
        return None, None
    forbidden = HOUSE_RULES[rule]
    for row in _accommodation_rows(ctx, plan):
        if forbidden in row.get("house_rules", ""):
            return False, f"the accommodation must allow {rule}"
    return True, None


def room_type(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    wanted = ctx.spec["local_constraint"].get("room type")
    if not wanted:
        return None, None
    for row in _accommodation_rows(ctx, plan):
        kind = row.get("room type")
        if (wanted == "not shared room" and kind == "Shared room") or (
                wanted != "not shared room" and kind != ROOM_TYPES[wanted]):
            return False, f"the room type should be {wanted}"
    return True, None


def cuisine(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    wanted = ctx.spec["local_constraint"].get("cuisine")
    if not wanted:
        return None, None
    served: set[str] = set()
    for day in _days(ctx, plan):
        for meal in MEALS:
            if not filled(day.get(meal)) or name_city(day[meal])[1] == ctx.spec["org"]:
                continue
            row = ctx.sandbox.find("restaurants", day[meal])
            if row:
                served.update(c for c in wanted if c in row["Cuisines"])
    missing = [c for c in wanted if c not in served]
    return (False, f"no {missing[0]} restaurant") if missing else (True, None)


def transportation(ctx: CheckContext, plan: list[dict[str, str]]) -> Result:
    rule = ctx.spec["local_constraint"].get("transportation")
    if not rule:
        return None, None
    banned = "flight" if rule == "no flight" else "self-driving"
    for i, day in enumerate(_days(ctx, plan), 1):
        if filled(day.get("transportation")) and banned in day["transportation"].lower():
            return False, f"day {i}: {rule}"
    return True, None


_COMMONSENSE_FNS = {"within_sandbox": within_sandbox, "complete_info": complete_info,
                    "within_current_city": within_current_city, "reasonable_city_route": reasonable_city_route,
                    "diverse_restaurants": diverse_restaurants, "diverse_attractions": diverse_attractions,
                    "non_conflicting_transport": non_conflicting_transport, "valid_accommodation": valid_accommodation}
_HARD_FNS = {"budget": budget, "room_rule": room_rule, "room_type": room_type, "cuisine": cuisine,
             "transportation": transportation}


@dataclass
class PlanReport:
    """Outcome of every check for one plan. None = not applicable / cannot be decided here."""

    delivered: bool
    commonsense: dict[str, bool | None]
    hard: dict[str, bool | None]
    reasons: dict[str, str] = field(default_factory=dict)
    unverifiable: list[str] = field(default_factory=list)

    @staticmethod
    def _count(results: dict[str, bool | None]) -> tuple[int, int]:
        decided = [r for r in results.values() if r is not None]
        return sum(decided), len(decided)

    def counts(self) -> dict[str, int]:
        cs_pass, cs_total = self._count(self.commonsense)
        hard_pass, hard_total = self._count(self.hard)
        return {"commonsense_passed": cs_pass, "commonsense_total": cs_total,
                "hard_passed": hard_pass, "hard_total": hard_total}

    @property
    def final_pass(self) -> bool:
        return self.delivered and all(r is not False for r in (*self.commonsense.values(), *self.hard.values()))


def _applicable_hard(spec: dict[str, Any]) -> dict[str, bool | None]:
    lc = spec["local_constraint"]
    return {"budget": False, "room_rule": False if lc.get("house rule") else None,
            "room_type": False if lc.get("room type") else None, "cuisine": False if lc.get("cuisine") else None,
            "transportation": False if lc.get("transportation") else None}


def evaluate_plan(spec: dict[str, Any], plan: list[dict[str, str]] | None, sandbox: Sandbox,
                  flights: dict[tuple[str, str], list[dict[str, Any]]], unverifiable: str = "exclude") -> PlanReport:
    """Run all checks on a parsed plan (None = nothing delivered). Never raises on odd plans."""
    if unverifiable not in ("exclude", "fail"):
        raise ValueError(f"unverifiable must be 'exclude' or 'fail', got {unverifiable!r}")
    if not plan:
        return PlanReport(False, {k: False for k in COMMONSENSE}, _applicable_hard(spec), {"delivery": "no plan"})
    ctx = CheckContext(spec, sandbox, flights, unverifiable)
    reasons: dict[str, str] = {}

    def run(fns: dict[str, Any]) -> dict[str, bool | None]:
        out: dict[str, bool | None] = {}
        for name, fn in fns.items():
            try:
                out[name], why = fn(ctx, plan)
            except Exception as err:  # an odd plan must cost its check, never the run
                out[name], why = False, f"unreadable plan ({type(err).__name__})"
            if why and out[name] is not True:
                reasons[name] = why
        return out

    commonsense = run(_COMMONSENSE_FNS)
    if commonsense["complete_info"] and commonsense["within_sandbox"] is not False:
        hard = run(_HARD_FNS)
    else:  # upstream: hard constraints are only judged on complete, in-sandbox plans
        hard = _applicable_hard(spec)
        reasons["hard"] = "not judged: the plan is incomplete or leaves the sandbox"
    return PlanReport(True, commonsense, hard, reasons, sorted(set(ctx.unverified)))
