"""TravelPlanner: loading, query parsing, plan parsing, the checks on known plans, simulator, bad input."""
import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genenv_pl.envs import DataError, InvalidTask, make_env
from genenv_pl.envs.travelplanner import (TRAIN_FILE, TRAIN_REF_FILE, VALIDATION_FILE, TravelPlannerEnv,
                                         aggregate_scores, build_reference, parse_query, route_legs)
from genenv_pl.envs.travelplanner_checks import (COMMONSENSE, HARD, CheckContext, evaluate_plan, parse_plan,
                                                 plan_cost)


@pytest.fixture(scope="module")
def env(data_root):
    return make_env("travelplanner", data_root=data_root)


@pytest.fixture(scope="module")
def rockford(env):
    """Train query 0: St. Petersburg -> Rockford, 3 days, 1 person, $1,700, flights both ways."""
    return env.seed_tasks()[0]


def gold(task):
    return copy.deepcopy(task.meta["gold_plan"])


def respond(plan):
    return "<think>plan</think><response>" + json.dumps(plan) + "</response>"


# ---- loading and splits ------------------------------------------------------------------
def test_loads_shared_data(env):
    assert len(env.seed_tasks()) == 45 and len(env.eval_tasks()) == 144 and env.skipped == {}
    assert {t.group for t in env.eval_tasks()} == {"3-day", "5-day", "7-day"}
    assert all(t.meta["gold_plan"] for t in env.seed_tasks())


def test_seed_and_eval_are_disjoint(env):
    seeds, evals = env.seed_tasks(), env.eval_tasks()
    assert not {t.id for t in seeds} & {t.id for t in evals}
    assert not {t.data["query"] for t in seeds} & {t.data["query"] for t in evals}
    assert not {env.task_key(t) for t in seeds} & {env.task_key(t) for t in evals}
    assert {t.meta["split"] for t in seeds} == {"train"} and {t.meta["split"] for t in evals} == {"validation"}


def test_eval_days_filter(data_root):
    only3 = TravelPlannerEnv(data_root=data_root, eval_days=[3])
    assert only3.eval_tasks() and all(t.data["days"] == 3 for t in only3.eval_tasks())


def test_tasks_are_json_serializable(env, rockford):
    json.dumps(rockford.to_dict())
    json.dumps(env.eval_tasks()[-1].to_dict())


# ---- query parsing -------------------------------------------------------------------------
def test_parser_agrees_with_reference_information_on_all_train_queries(env):
    for task in env.seed_tasks():
        legs = route_legs(env.reference(task))
        stays = [b for _, b, _ in legs[:-1]]
        d = task.data
        assert legs[0][0] == d["org"] and legs[-1][1] == d["org"], task.id
        assert (legs[0][2], legs[-1][2]) == (d["date"][0], d["date"][-1]), task.id
        assert len(stays) == d["visiting_city_number"], task.id
        if d["days"] == 3:
            assert stays == [d["dest"]], task.id
        else:
            assert {env.sandbox.city_state[c] for c in stays} == {d["dest"]}, task.id


NONE = {"house rule": None, "cuisine": None, "room type": None, "transportation": None}


@pytest.mark.parametrize("query, expected", [
    ("Please help me plan a trip from St. Petersburg to Rockford spanning 3 days from March 16th to March 18th, "
     "2022. The travel should be planned for a single person with a budget of $1,700.",
     {"org": "St. Petersburg", "dest": "Rockford", "days": 3, "people_number": 1, "budget": 1700,
      "local_constraint": NONE}),
    ("Please create a 3-day travel itinerary for 2 people beginning in Fort Lauderdale and ending in Milwaukee "
     "from the 8th to the 10th of March, 2022. Our travel budget is set at $1,100. We'd love to experience both "
     "American and Chinese cuisines during our journey.",
     {"org": "Fort Lauderdale", "dest": "Milwaukee", "days": 3, "people_number": 2, "budget": 1100,
      "local_constraint": {**NONE, "cuisine": ["American", "Chinese"]}}),
    ("Please help me craft a 7-day travel plan for one person departing from Charlotte in North Carolina, "
     "visiting 3 cities in Pennsylvania. The travel dates are from March 6th to March 12th, 2022. The allocated "
     "budget for this trip is $5,100.",
     {"org": "Charlotte", "dest": "Pennsylvania", "days": 7, "people_number": 1, "budget": 5100,
      "local_constraint": NONE}),
    ("Could you create a 3-day travel itinerary for a party of 2, from Jacksonville to Washington between March "
     "3rd and March 5th, 2022, with a budget of $1,000? Please note we're looking for accommodations where "
     "parties are allowed.",
     {"org": "Jacksonville", "dest": "Washington", "days": 3, "people_number": 2, "budget": 1000,
      "local_constraint": {**NONE, "house rule": "parties"}}),
    ("Can you please generate a 3-day travel plan for 2 people departing from New York and traveling to "
     "Charleston from March 19th to March 21st, 2022? Our budget is set at $1,600. We require accommodations "
     "that allow smoking and should not be shared rooms.",
     {"org": "New York", "dest": "Charleston", "days": 3, "people_number": 2, "budget": 1600,
      "local_constraint": {**NONE, "house rule": "smoking", "room type": "not shared room"}}),
    ("Could you create a 5-day travel itinerary for two people, leaving from Chicago and visiting 2 cities in "
     "North Carolina from March 5th to March 9th, 2022? Our budget is $3,600. We require non-shared "
     "accommodations that are pet-friendly because we will be bringing our pets. We'll not be flying and will "
     "presumably drive to the destination.",
     {"org": "Chicago", "dest": "North Carolina", "days": 5, "people_number": 2, "budget": 3600,
      "local_constraint": {**NONE, "house rule": "pets", "room type": "not shared room",
                           "transportation": "no flight"}}),
    ("Can you help devise a 7-day travel itinerary for 2 people, beginning in Salt Lake City and includes "
     "visiting 3 unique cities in Montana from March 16th to 22nd, 2022? We have a planned budget of $7,200. "
     "Lastly, we prefer not to drive ourselves throughout this journey.",
     {"org": "Salt Lake City", "dest": "Montana", "days": 7, "people_number": 2, "budget": 7200,
      "local_constraint": {**NONE, "transportation": "no self-driving"}}),
    ("Could you devise a 7-day travel itinerary for a pair, departing from Moline and heading to Texas, during "
     "which we will visit 3 different cities? The travel dates are scheduled from March 19th to March 25th, "
     "2022. Our revised budget is set at $5,500. For our accommodations, we would prefer to have entire rooms. "
     "We intend to avoid any flights for our transportation.",
     {"org": "Moline", "dest": "Texas", "days": 7, "people_number": 2, "budget": 5500,
      "local_constraint": {**NONE, "room type": "entire room", "transportation": "no flight"}}),
    ("We're planning a one-week trip for 4 people from Kansas City to Kansas, visiting 3 cities between March "
     "1st and March 7th, 2022, with $9,000. We prefer private rooms and accommodations suitable for kids.",
     {"org": "Kansas City", "dest": "Kansas", "days": 7, "people_number": 4, "budget": 9000,
      "local_constraint": {**NONE, "house rule": "children under 10", "room type": "private room"}}),
])
def test_parse_query_table(env, query, expected):
    got = parse_query(query, env.sandbox.city_state, env.sandbox.states)
    assert {k: got[k] for k in expected} == expected
    assert len(got["date"]) == got["days"] and got["visiting_city_number"] == {3: 1, 5: 2, 7: 3}[got["days"]]


@pytest.mark.parametrize("query, error", [
    ("A trip from Denver to Dallas with a budget of $900.", "no dates"),
    ("A 3-day trip from Denver to Dallas from March 1st to March 3rd, 2022.", "no budget"),
    ("A 5-day trip from Denver to Dallas from March 1st to March 3rd, 2022, budget $900.", "says 5 days"),
    ("A trip from Denver to Dallas from March 1st to March 4th, 2022, budget $900.", "3, 5 or 7"),
    ("A 3-day trip to nowhere from March 1st to March 3rd, 2022, budget $900.", "no origin"),
    ("A 5-day trip from Denver visiting 2 cities from March 1st to March 5th, 2022, budget $900.", "no destination"),
    ("A 3-day trip from Denver to Dallas visiting 2 cities from March 1st to March 3rd, 2022, budget $900.",
     "visits 1 cities"),
    ("A 3-day trip from Denver to Dallas from February 30th to March 2nd, 2022, budget $900.", "day is out of range"),
])
def test_parse_query_errors(env, query, error):
    with pytest.raises(ValueError, match=error):
        parse_query(query, env.sandbox.city_state, env.sandbox.states)


# ---- plan parsing ---------------------------------------------------------------------------
def test_plan_parsing_formats(rockford):
    plan = gold(rockford)
    as_json = json.dumps(plan)
    text = "\n\n".join(
        f"Day {d['days']}:\n" + "\n".join(f"{k.replace('_', ' ').title()}: {v}" for k, v in d.items() if k != "days")
        for d in plan)
    variants = [
        respond(plan),
        as_json,
        "Here is the plan:\n```json\n" + as_json + "\n```",
        repr(plan + [{}, {}]),  # the benchmark's own gold format: a Python literal padded with {}
        json.dumps({"plan": plan}),
        "<think>[not a plan]</think><response>" + as_json,  # unclosed response: falls back to the text
        text,
    ]
    expected = parse_plan(as_json)
    assert expected and len(expected) == 3 and expected[0]["current_city"] == "from St. Petersburg to Rockford"
    for variant in variants:
        got = parse_plan(variant)
        assert [{k: d[k] for k in expected[0] if k != "days"} for d in got] == \
               [{k: d[k] for k in expected[0] if k != "days"} for d in expected], variant[:60]


@pytest.mark.parametrize("text", [
    "", None, "I cannot help with that.", "[]", "[{}]", "[1, 2, 3]", '{"plan": "soon"}', "[" * 5000,
    "[" * 50 + "]" * 50, "Day 1:\nnothing useful", "<response></response>", "\x00\ufffd" * 100,
    "[{'days': 1, 'current_city': __import__('os').system('echo hacked')}]",
])
def test_unreadable_plans_are_not_delivered(text):
    assert parse_plan(text) is None


def test_plan_keys_are_normalized():
    plan = parse_plan('[{"Day": 1, "Current City": "from A to B", "Attractions": ["X, B", "Y, B"], '
                      '"Breakfast": "Cafe, B; Cost: 14", "Accommodation": null}]')
    assert plan == [{"days": "1", "current_city": "from A to B", "attraction": "X, B;Y, B", "breakfast": "Cafe, B",
                     "accommodation": ""}]


# ---- the checks on known plans --------------------------------------------------------------
def test_gold_plans_pass_every_check_but_one_known_annotation_error(env):
    failures = {}
    for task in env.seed_tasks():
        report = env.check(task, respond(gold(task)))
        assert report.delivered and not report.unverifiable and None not in report.commonsense.values()
        failed = [k for k, v in {**report.commonsense, **report.hard}.items() if v is False]
        if failed:
            failures[task.id] = failed
    # Gold plan 41 lists San Angelo attractions on a day spent in San Antonio (upstream fails it too).
    assert failures == {"travelplanner-train-41": ["within_current_city"]}


def test_gold_plan_in_the_benchmark_text_format_scores_the_same(env, rockford):
    raw = repr(rockford.meta["gold_plan"] + [{}, {}, {}, {}])
    assert env.score(rockford, raw) == env.score(rockford, respond(gold(rockford)))
    assert env.reward(rockford, raw) == 1.0


def test_cost_of_the_rockford_gold_plan(env, rockford):
    # flights 474 + 346; meals 72+29+20+56+42+49+34 (first "Subway" row, as upstream); 2 nights x 243
    ctx = CheckContext(dict(rockford.data), env.sandbox, {("St. Petersburg", "Rockford"): [
        {"Flight Number": "F3573659", "Price": 474}], ("Rockford", "St. Petersburg"): [
        {"Flight Number": "F3573120", "Price": 346}]})
    assert plan_cost(ctx, parse_plan(json.dumps(gold(rockford)))) == (820 + 302 + 486, True)
    ctx.spec["people_number"] = 4  # max occupancy 3 -> 2 rooms; flights and meals per person
    assert plan_cost(ctx, parse_plan(json.dumps(gold(rockford)))) == (4 * 820 + 4 * 302 + 2 * 486, True)


def _edit(plan, day, **fields):
    plan[day - 1].update(fields)
    return plan


CHICAGO_MEAL = "The Black Pearl, Chicago"  # a real restaurant, in another city
LONG_STAY = "The heart of Brooklyn, Rockford"  # minimum 30 nights, cheaper than the gold's room
DRIVE_HOME = "Self-driving, from Rockford to St. Petersburg, duration: 1 day, distance: 1 km, cost: 1"


@pytest.mark.parametrize("edit, failing", [
    (lambda p: _edit(p, 2, dinner="Flying Mango, Rockford"), {"diverse_restaurants"}),
    (lambda p: _edit(p, 3, attraction="Burpee Museum of Natural History, Rockford"), {"diverse_attractions"}),
    (lambda p: _edit(p, 2, lunch="Nonexistent Diner, Rockford"), {"within_sandbox", "hard:gated"}),
    (lambda p: _edit(p, 2, lunch="Flying, Rockford"), {"within_sandbox", "hard:gated"}),  # substring only
    (lambda p: _edit(p, 2, lunch=CHICAGO_MEAL), {"within_current_city"}),
    (lambda p: _edit(_edit(p, 1, accommodation=LONG_STAY), 2, accommodation=LONG_STAY), {"valid_accommodation"}),
    (lambda p: p[:2], {"complete_info", "reasonable_city_route", "hard:gated"}),
    (lambda p: _edit(p, 2, attraction="-"), {"complete_info", "hard:gated"}),
    (lambda p: _edit(p, 1, current_city="from Chicago to Rockford"),
     {"complete_info", "reasonable_city_route", "within_current_city", "hard:gated"}),
    (lambda p: _edit(p, 3, transportation=DRIVE_HOME), {"within_sandbox", "non_conflicting_transport", "hard:gated"}),
    (lambda p: _edit(p, 1, transportation="Flight Number: F0000000, from St. Petersburg to Rockford"),
     {"within_sandbox", "hard:gated"}),
    (lambda p: _edit(p, 3, transportation="Bus, from Rockford to St. Petersburg"), {"within_sandbox", "hard:gated"}),
    (lambda p: _edit(p, 1, transportation="-"), {"complete_info", "non_conflicting_transport", "hard:gated"}),
])
def test_each_check_catches_its_violation(env, rockford, edit, failing):
    report = env.check(rockford, respond(edit(gold(rockford))))
    failed = {k for k, v in report.commonsense.items() if v is False}
    gated = "hard" in report.reasons
    assert failed | ({"hard:gated"} if gated else set()) == failing, report.reasons
    if not gated:
        assert all(v is not False for v in report.hard.values())
    assert 0.0 <= env.reward(rockford, respond(edit(gold(rockford)))) < 1.0


LC = {"house rule": None, "cuisine": None, "room type": None, "transportation": None}


@pytest.mark.parametrize("change, expected", [
    ({}, {"budget": True, "room_rule": None, "room_type": None, "cuisine": None, "transportation": None}),
    ({"budget": 1608}, {"budget": True}),
    ({"budget": 1607}, {"budget": False}),
    ({"people_number": 2, "budget": 2 * 820 + 2 * 302 + 486}, {"budget": True}),
    ({"local_constraint": {**LC, "house rule": "smoking"}}, {"room_rule": False}),  # "No smoking & No parties"
    ({"local_constraint": {**LC, "house rule": "parties"}}, {"room_rule": False}),  # upstream never checks this
    ({"local_constraint": {**LC, "house rule": "pets"}}, {"room_rule": True}),
    ({"local_constraint": {**LC, "room type": "entire room"}}, {"room_type": True}),
    ({"local_constraint": {**LC, "room type": "not shared room"}}, {"room_type": True}),
    ({"local_constraint": {**LC, "room type": "private room"}}, {"room_type": False}),
    ({"local_constraint": {**LC, "room type": "shared room"}}, {"room_type": False}),
    ({"local_constraint": {**LC, "cuisine": ["French", "American", "Chinese", "Mediterranean"]}}, {"cuisine": True}),
    ({"local_constraint": {**LC, "cuisine": ["French", "Mexican"]}}, {"cuisine": False}),
    ({"local_constraint": {**LC, "transportation": "no flight"}}, {"transportation": False}),
    ({"local_constraint": {**LC, "transportation": "no self-driving"}}, {"transportation": True}),
])
def test_hard_constraint_table(env, rockford, change, expected):
    task = copy.deepcopy(rockford)
    task.data.update(change)
    report = env.check(task, respond(gold(task)))
    assert all(report.commonsense.values())
    assert {k: report.hard[k] for k in expected} == expected


@pytest.mark.parametrize("policy, budget, sandbox, cost_check", [
    ("exclude", 1700, None, None),  # the flights cannot be checked: left out of both denominators
    ("exclude", 100, None, False),  # known costs alone (meals, rooms) exceed the budget: a sure failure
    ("fail", 1700, False, False),
])
def test_unverifiable_flights(env, rockford, policy, budget, sandbox, cost_check):
    spec = {**rockford.data, "budget": budget}
    report = evaluate_plan(spec, parse_plan(json.dumps(gold(rockford))), env.sandbox, {}, unverifiable=policy)
    assert report.commonsense["within_sandbox"] is sandbox
    assert len(report.unverifiable) == 2
    if sandbox is None:
        assert report.hard["budget"] is cost_check
        assert report.counts()["commonsense_total"] == 7


def test_validation_flights_are_unverifiable_in_score_but_fail_in_reward(env):
    task = next(t for t in env.eval_tasks() if t.data["days"] == 3 and t.data["org"] == "Oakland")
    plan = [
        {"days": 1, "current_city": "from Oakland to Tucson",
         "transportation": "Flight Number: F4002752, from Oakland to Tucson, Departure Time: 15:07, "
                           "Arrival Time: 17:00",
         "breakfast": "-", "attraction": "-", "lunch": "-", "dinner": "-", "accommodation": "-"}]
    score = env.score(task, respond(plan))
    assert score["unverifiable"] == 1.0 and score["commonsense_total"] == 7
    assert env.check(task, respond(plan), unverifiable="fail").commonsense["within_sandbox"] is False


def test_score_and_aggregate(env, rockford):
    good = env.score(rockford, respond(gold(rockford)))
    report = env.check(rockford, respond(gold(rockford)))
    assert tuple(report.commonsense) == COMMONSENSE and tuple(report.hard) == HARD
    assert good["accuracy"] == good["final_pass"] == good["commonsense_macro"] == good["hard_macro"] == 1.0
    assert (good["commonsense_total"], good["hard_total"]) == (8, 1)
    bad = env.score(rockford, "Sorry, I cannot plan this trip.")
    assert bad["delivered"] == 0.0 and bad["format_error"] == 1.0 and bad["accuracy"] == 0.0
    assert (bad["commonsense_passed"], bad["commonsense_total"], bad["hard_total"]) == (0, 8, 1)
    agg = aggregate_scores([good, bad])
    assert agg["delivery_rate"] == 0.5 and agg["final_pass_rate"] == 0.5
    assert agg["commonsense_micro"] == 0.5 and agg["hard_micro"] == 0.5 and agg["score_macro"] == 0.5
    assert aggregate_scores([]) == {}


# Hand-built plans with every metric known. Rockford with two satisfied hard constraints (pets
# allowed, entire room), so each query decides 8 commonsense and 3 hard checks (budget included).
PETS_ENTIRE = {"house rule": "pets", "cuisine": None, "room type": "entire room", "transportation": None}
PETS_PRIVATE = {**PETS_ENTIRE, "room type": "private room"}  # the gold's room is an entire home
METRICS = ("delivered", "commonsense_micro", "commonsense_macro", "hard_micro", "hard_macro", "final_pass",
           "accuracy")
#   (case, local constraints, plan -> response, (passed/decided commonsense, passed/decided hard), per-task metrics)
METRIC_CASES = [
    ("gold", PETS_ENTIRE, respond, (8, 8, 3, 3), (1, 1, 1, 1, 1, 1, 1)),
    ("repeated restaurant", PETS_ENTIRE, lambda p: respond(_edit(p, 2, dinner="Flying Mango, Rockford")),
     (7, 8, 3, 3), (1, 7 / 8, 0, 1, 1, 0, (7 / 8 + 0 + 1 + 1) / 4)),
    ("wrong room type", PETS_PRIVATE, respond, (8, 8, 2, 3), (1, 1, 1, 2 / 3, 0, 0, (1 + 1 + 2 / 3 + 0) / 4)),
    ("two days of three", PETS_ENTIRE, lambda p: respond(p[:2]),  # incomplete: hard checks not judged, all fail
     (6, 8, 0, 3), (1, 6 / 8, 0, 0, 0, 0, (6 / 8) / 4)),
    ("no plan", PETS_ENTIRE, lambda p: "Sorry, I cannot plan this trip.", (0, 8, 0, 3), (0, 0, 0, 0, 0, 0, 0)),
]


def _metric_task(rockford, constraints):
    task = copy.deepcopy(rockford)
    task.data["local_constraint"] = dict(constraints)
    return task


@pytest.mark.parametrize("case, constraints, make, counts, expected", METRIC_CASES, ids=[c[0] for c in METRIC_CASES])
def test_score_metrics_table(env, rockford, case, constraints, make, counts, expected):
    got = env.score(_metric_task(rockford, constraints), make(gold(rockford)))
    assert (got["commonsense_passed"], got["commonsense_total"], got["hard_passed"], got["hard_total"]) == counts
    assert {k: got[k] for k in METRICS} == pytest.approx(dict(zip(METRICS, expected)))
    assert got["format_error"] == 1 - got["delivered"]


def test_aggregate_metrics_table(env, rockford):
    scores = [env.score(_metric_task(rockford, lc), make(gold(rockford))) for _, lc, make, _, _ in METRIC_CASES]
    cs_micro, hard_micro = (8 + 7 + 8 + 6 + 0) / 40, (3 + 3 + 2 + 0 + 0) / 15  # summed counts, not mean rates
    cs_macro, hard_macro = 2 / 5, 2 / 5  # gold + wrong room type; gold + repeated restaurant
    assert aggregate_scores(scores) == pytest.approx({
        "delivery_rate": 4 / 5, "commonsense_micro": cs_micro, "commonsense_macro": cs_macro,
        "hard_micro": hard_micro, "hard_macro": hard_macro, "final_pass_rate": 1 / 5,
        "accuracy": (cs_micro + cs_macro + hard_micro + hard_macro) / 4,  # the paper's CS/HD average
        "score_micro": (cs_micro + hard_micro) / 2, "score_macro": (cs_macro + hard_macro) / 2,
        "unverifiable_rate": 0.0})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=400) | st.builds(lambda days: json.dumps(days), st.lists(
    st.dictionaries(st.sampled_from(["days", "current_city", "transportation", "breakfast", "attraction", "lunch",
                                     "dinner", "accommodation", "x"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=30),
                              st.sampled_from(["-", "from Rockford to St. Petersburg", "Coco Bambu, Rockford"]))),
    max_size=5)))
def test_reward_never_raises_and_stays_in_range(env, rockford, text):
    assert 0.0 <= env.reward(rockford, text) <= 1.0
    assert set(env.score(rockford, text)) >= {"accuracy", "format_error"}


# ---- prompts and reference information ------------------------------------------------------
def test_agent_prompt_shows_reference_and_query(env, rockford):
    system, user = env.agent_prompt(rockford)
    assert "<response>" in system["content"] and '"current_city"' in system["content"]
    assert "Coco Bambu" in user["content"] and "F3573659" in user["content"]
    assert user["content"].endswith(rockford.data["query"])


def test_rebuilt_reference_matches_the_shipped_one_for_a_train_city(env, rockford):
    shipped = env.reference(rockford)
    rebuilt = build_reference(env.sandbox, "St. Petersburg", ["Rockford"])
    for kind, key in (("Attractions", "Name"), ("Restaurants", "Name"), ("Accommodations", "NAME")):
        section = f"{kind} in Rockford"
        assert [r[key] for r in rebuilt[section]] == [r[key] for r in shipped[section]]
    assert "missing" in rebuilt["Flights"]
    assert rebuilt["Self-driving from St. Petersburg to Rockford"] == "No valid information."


def test_validation_reference_offers_cities_of_the_destination_state(env):
    task = next(t for t in env.eval_tasks() if t.data["days"] == 7)
    ref = env.reference(task)
    cities = [k[len("Attractions in "):] for k in ref if k.startswith("Attractions in ")]
    assert len(cities) == env.max_candidate_cities
    assert {env.sandbox.city_state[c] for c in cities} == {task.data["dest"]}
    assert f"Taxi from {task.data['org']} to {cities[0]}" in ref


# ---- simulator ------------------------------------------------------------------------------
VARIANT = ("Please help me plan a trip from St. Petersburg to Rockford spanning 3 days from March 16th to March "
           "18th, 2022. The travel is for 2 people with a budget of $2,500. We need accommodations that allow pets "
           "and we would love to try Chinese food.")
VARIANT_LC = {"house rule": "pets", "cuisine": ["Chinese"], "room type": None, "transportation": None}


def _sim(**fields):
    return json.dumps({"query": VARIANT, **fields})


@pytest.mark.parametrize("text", [
    _sim(),
    _sim(people_number=2, budget=2500, local_constraint=VARIANT_LC),
    "Here you go:\n```json\n" + _sim(budget=2500) + "\n```",
])
def test_simulator_variation_accepted(env, rockford, text):
    task = env.parse_task(text, rockford)
    assert task.data["people_number"] == 2 and task.data["budget"] == 2500
    assert task.data["local_constraint"] == VARIANT_LC
    assert task.data["ref_id"] == rockford.data["ref_id"] and task.group == "generated"
    assert env.agent_prompt(task)[1]["content"].endswith(VARIANT)
    json.dumps(task.to_dict())


@pytest.mark.parametrize("text, reason", [
    ("no json", "unparseable"),
    (json.dumps({"budget": 2500}), "missing_field"),
    (json.dumps({"query": "Plan me something nice."}), "unparseable_query"),
    (_sim().replace("Rockford", "Denver"), "changed_route"),
    (_sim().replace("March 16th to March 18th", "March 17th to March 19th"), "changed_route"),
    (_sim(budget=2000), "inconsistent_fields"),
    (_sim(people_number=3), "inconsistent_fields"),
    (_sim(local_constraint={**VARIANT_LC, "cuisine": ["Chinese", "French"]}), "inconsistent_fields"),
    (_sim(local_constraint={**VARIANT_LC, "house rule": "dancing"}), "bad_constraint"),
    (_sim(local_constraint="pets"), "inconsistent_fields"),
    (_sim().replace("2 people", "12 people"), "bad_people"),
    (_sim().replace("$2,500", "$300"), "infeasible_budget"),
    (_sim().replace("food.", "food. We won't fly."), "infeasible_constraint"),  # no ground route either
    (_sim().replace("food.", "food. We want shared rooms."), "infeasible_constraint"),  # none in Rockford
])
def test_simulator_variation_rejected(env, rockford, text, reason):
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, rockford)
    assert err.value.reason == reason, str(err.value)


def test_simulator_copy_of_seed_rejected(env, rockford):
    with pytest.raises(InvalidTask) as err:
        env.parse_task(json.dumps({"query": rockford.data["query"]}), rockford)
    assert err.value.reason == "copy_of_seed"


def test_simulator_prompt_names_the_fixed_route(env, rockford, monkeypatch):
    monkeypatch.setattr(env, "sim_prompt", "rule")  # (tests/envs/test_sim_prompt.py covers both modes)
    system, user = env.simulator_prompt(rockford, 0.9)
    assert "harder" in user["content"] and "St. Petersburg to Rockford" in user["content"]
    assert "easier" in env.simulator_prompt(rockford, 0.1)[1]["content"]


# ---- bad input ------------------------------------------------------------------------------
def _make_root(tmp_path, data_root, train_lines=None, ref_lines=None, val_lines=None, break_csv=False):
    """A copy of the travelplanner folder with some files replaced (database tables are linked)."""
    src = os.path.join(data_root, "travelplanner")
    dst = tmp_path / "travelplanner"
    (dst / "database").mkdir(parents=True)
    for sub in ("accommodations", "attractions", "restaurants", "googleDistanceMatrix", "background"):
        target = dst / "database" / sub
        if sub == "restaurants" and break_csv:
            target.mkdir()
            (target / "clean_restaurant_2022.csv").write_text("Name,City\nX,Y\n")
        else:
            os.symlink(os.path.join(src, "database", sub), target)

    def lines(rel, override, n):
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            original = f.read().splitlines()[:n]
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text("\n".join(override if override is not None else original) + "\n")
        return original

    train = lines(TRAIN_FILE, train_lines, 3)
    lines(TRAIN_REF_FILE, ref_lines, 3)
    val = lines(VALIDATION_FILE, val_lines, 3)
    return str(tmp_path), train, val


def test_records_missing_fields_are_skipped_and_counted(tmp_path, data_root):
    _, train, val = _make_root(tmp_path / "probe", data_root)
    no_query = json.loads(val[1])
    del no_query["query"]
    no_idx = json.loads(val[2])
    del no_idx["idx"]
    no_answer = json.loads(train[1])
    no_answer["messages"] = [m for m in no_answer["messages"] if m["role"] != "assistant"]
    root, _, _ = _make_root(tmp_path / "case", data_root, train_lines=[train[0], json.dumps(no_answer), train[2]],
                            val_lines=[val[0], json.dumps(no_query), json.dumps(no_idx)])
    env = TravelPlannerEnv(data_root=root)
    assert len(env.seed_tasks()) == 2 and len(env.eval_tasks()) == 1
    assert env.skipped == {"missing field 'plan'": 1, "missing field 'query'": 1, "missing field 'idx'": 1}


@pytest.mark.parametrize("which, match", [
    ("train", r"std_travelplanner\.jsonl: line 2"),
    ("val", r"example_evaluation\.jsonl: line 2"),
    ("ref_count", r"aligned by line"),
    ("csv", r"clean_restaurant_2022\.csv"),
])
def test_malformed_files_raise_data_error_naming_them(tmp_path, data_root, which, match):
    _, train, val = _make_root(tmp_path / "probe", data_root)
    kwargs = {"train": {"train_lines": [train[0], "{broken"]}, "val": {"val_lines": [val[0], "[1, 2]"]},
              "ref_count": {"ref_lines": ["{}"]}, "csv": {"break_csv": True}}[which]
    root, _, _ = _make_root(tmp_path / "case", data_root, **kwargs)
    with pytest.raises(DataError, match=match):
        TravelPlannerEnv(data_root=root)


def test_missing_data_folder(tmp_path):
    with pytest.raises(DataError, match="travelplanner"):
        TravelPlannerEnv(data_root=str(tmp_path))


def test_bad_policy_is_refused(data_root):
    with pytest.raises(ValueError):
        TravelPlannerEnv(data_root=data_root, unverifiable_flights="maybe")
