"""API-Bank's schedule APIs: agendas, alarms, reminders and meetings (Add/Delete/Modify/Query of each).

All four families work the same way upstream: a table of `init_database/<Family>.json` keyed by id, each
record owned by a `username`; Delete/Modify/Query find the first record of the token's user that matches
on the identifying text (content / meeting topic) or on the time. Upstream's files for DeleteAgenda,
QueryAgenda, DeleteAlarm, ModifyAlarm and QueryAlarm are not published; those follow the same pattern,
with their parameters and messages taken from the recorded calls and `data/exceptions.json`.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable

from genenv_pl.envs.api_bank_sim.core import ApiError, Session, Result, api, check_token

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

# Upstream's `input_parameters` of these classes (names and type names as its ToolManager converts them).
# `data/all_apis.csv` describes earlier designs of most of them (ids instead of content/time, `recipients`,
# ...), which the recorded calls do not use; these are the parameters the recorded calls are executed with.
# From the upstream classes where published, else from the recorded calls (marked).
PARAMETERS: dict[str, dict[str, str]] = {
    "AddAgenda": {"token": "str", "content": "str", "time": "str", "location": "str"},
    "DeleteAgenda": {"token": "str", "content": "str", "time": "str", "location": "str"},  # recorded calls
    "ModifyAgenda": {"token": "str", "content": "str", "time": "str", "location": "str"},
    "QueryAgenda": {"token": "str", "content": "str", "time": "str", "location": "str"},  # recorded calls
    "AddAlarm": {"token": "str", "time": "str"},
    "DeleteAlarm": {"token": "str", "time": "str"},  # recorded calls
    "ModifyAlarm": {"token": "str", "from_time": "str", "to_time": "str"},  # recorded calls
    "QueryAlarm": {"token": "str", "time": "str"},  # recorded calls
    "AddReminder": {"token": "str", "content": "str", "time": "str"},
    "DeleteReminder": {"token": "str", "content": "str", "time": "str"},
    "ModifyReminder": {"token": "str", "content": "str", "time": "str"},
    "QueryReminder": {"token": "str", "content": "str", "time": "str"},
    **{name: {"token": "str", "meeting_topic": "str", "start_time": "str", "end_time": "str",
              "location": "str", "attendees": "list(str)"}
       for name in ("AddMeeting", "DeleteMeeting", "ModifyMeeting", "QueryMeeting")},
}


# ---- shared helpers ---------------------------------------------------------------------------------

def _parse_time(value: str) -> None:
    """Upstream validates times with `datetime.strptime`; its ValueError text is the exception."""
    try:
        datetime.datetime.strptime(value, TIME_FORMAT)
    except ValueError as e:
        raise ApiError(str(e)) from e


def _require(text: str, message: str) -> None:
    if text.strip() == "":
        raise ApiError(message)


def _find(db: Session, table: str, token: str, **wanted: str) -> dict[str, Any] | None:
    """The first record (in the table's id order, as upstream iterates) of the token's user that equals
    any one of `wanted`'s fields; None when there is none. The token is checked first, as upstream does
    before its loop, so an invalid token wins over "no such record"."""
    username = check_token(db, token)
    for record in db.table(table).values():
        if record.get("username") == username and any(record.get(k) == v for k, v in wanted.items()):
            return record
    return None


def _store(db: Session, table: str, token: str, **fields: Any) -> str:
    """Add the token's user's record under the next id (upstream: the table's size plus one), so that the
    dialogue's later calls find it when its earlier calls are replayed."""
    records = db.table(table)
    records[str(len(records) + 1)] = {"username": check_token(db, token), **fields}
    return "success"


def _drop(db: Session, table: str, record: dict[str, Any]) -> str:
    records = db.table(table)
    for key in [k for k, v in records.items() if v is record]:
        del records[key]
    return "success"


def _not_found(messages: list[tuple[str, str]]) -> None:
    """Upstream's fallthrough after its loop: raise the message of the first given (non-empty)
    identifier; with every identifier empty it raises nothing, and each API says what it returns."""
    for value, message in messages:
        if value:
            raise ApiError(message)


# Upstream's Modify/QueryAgenda *return* (not raise) `Exception('Error')` when neither content nor time
# is given and nothing matched; this text stands in for that object, which is no JSON value.
NOTHING_GIVEN = "Error"


def _same_words(a: str, b: str, lower: bool) -> bool:
    """Upstream's loose text match: Jaccard similarity of space-split word sets above 0.5."""
    if lower:
        a, b = a.lower(), b.lower()
    x, y = set(a.split(" ")), set(b.split(" "))
    return len(x & y) / len(x | y) > 0.5


def _outcome_equal(response: Result, gold: Result) -> bool:
    return response.get("output") == gold.get("output") and response.get("exception") == gold.get("exception")


def _text_check(text: str, lower: bool, fields: tuple[str, ...] | None) -> Callable[[Result, Result], bool]:
    """Checks that match `text` loosely (`_same_words`), then compare output, exception and either the
    input's `fields` or (fields None) the whole rest of the input."""
    def check(response: Result, gold: Result) -> bool:
        r_in, g_in = response.get("input") or {}, gold.get("input") or {}
        if not _same_words(str(r_in.get(text, "")), str(g_in.get(text, "")), lower):
            return False
        if fields is None:
            same_input = {k: v for k, v in r_in.items() if k != text} == {k: v for k, v in g_in.items() if k != text}
        else:
            same_input = all(r_in.get(f) == g_in.get(f) for f in fields)
        return same_input and _outcome_equal(response, gold)
    return check


def _delete_check(time_field: str) -> Callable[[Result, Result], bool]:
    """Upstream's Delete checks: when both calls succeed only the time has to agree (the content may be
    worded differently); otherwise output and exception must be equal, whatever the input."""
    def check(response: Result, gold: Result) -> bool:
        if response.get("output") == "success" and gold.get("output") == "success":
            return (response.get("input") or {}).get(time_field) == (gold.get("input") or {}).get(time_field)
        return _outcome_equal(response, gold)
    return check


# AddAgenda, ModifyAgenda: upstream compares content loosely (case-sensitive), time and location exactly,
# output and exception; not the token.
_agenda_check = _text_check("content", lower=False, fields=("time", "location"))
# Reminder Add/Modify/Query: content loosely (lower-cased), time exactly, output and exception; not the token.
_reminder_check = _text_check("content", lower=True, fields=("time",))
# Meeting Add/Modify/Query: meeting_topic loosely (case-sensitive), every other input field exactly
# (the token included), output and exception.
_meeting_check = _text_check("meeting_topic", lower=False, fields=None)


# ---- Agenda -------------------------------------------------------------------------------------------

@api("AddAgenda", check=_agenda_check)
def add_agenda(db: Session, token: str, content: str, time: str, location: str) -> str:
    _parse_time(time)
    _require(content, "Content should not be null")
    return _store(db, "Agenda", token, content=content, time=time, location=location)


def _agenda_record(db: Session, token: str, content: str, time: str, noun: str) -> dict[str, Any] | None:
    """The user's agenda item about `content` or at `time` (upstream's Modify/Delete/Query lookup);
    None when nothing matched and neither was given."""
    if time:
        _parse_time(time)
    record = _find(db, "Agenda", token, content=content, time=time)
    if record is None:
        _not_found([(content, f"You have no {noun} about {content}"), (time, f"You have no {noun} at time : {time}")])
    return record


# DeleteAgenda: upstream file not published. Its recorded messages (exceptions.json) say "meeting", as
# DeleteMeeting's do, and like DeleteMeeting it has no other exit than "success"; its check is unknown,
# so the default (input, output, exception equal) applies.
@api("DeleteAgenda")
def delete_agenda(db: Session, token: str, content: str, time: str, location: str) -> str:
    record = _agenda_record(db, token, content, time, "meeting")
    return _drop(db, "Agenda", record) if record is not None else "success"


@api("ModifyAgenda", check=_agenda_check)
def modify_agenda(db: Session, token: str, content: str, time: str, location: str) -> str:
    return "success" if _agenda_record(db, token, content, time, "agenda") is not None else NOTHING_GIVEN


# QueryAgenda: upstream file not published; the recorded call returns the matching record (username
# included), matched by content though the given time differs, as the published Query APIs do.
@api("QueryAgenda")
def query_agenda(db: Session, token: str, content: str, time: str, location: str) -> dict[str, Any] | str:
    record = _agenda_record(db, token, content, time, "agenda")
    return record if record is not None else NOTHING_GIVEN


# ---- Alarm --------------------------------------------------------------------------------------------

@api("AddAlarm")
def add_alarm(db: Session, token: str, time: str) -> str:
    _parse_time(time)
    return _store(db, "Alarm", token, time=time)


def _alarm_record(db: Session, token: str, time: str) -> dict[str, Any]:
    """The user's alarm at exactly `time` (an alarm has nothing else to identify it)."""
    _parse_time(time)
    record = _find(db, "Alarm", token, time=time)
    if record is None:  # a valid time is never empty, so there is always a message
        raise ApiError(f"You have no alarm clock at time : {time}")
    return record


# DeleteAlarm, ModifyAlarm, QueryAlarm: upstream files not published (default checks).
@api("DeleteAlarm")
def delete_alarm(db: Session, token: str, time: str) -> str:
    return _drop(db, "Alarm", _alarm_record(db, token, time))


@api("ModifyAlarm")
def modify_alarm(db: Session, token: str, from_time: str, to_time: str) -> str:
    _parse_time(from_time)
    _parse_time(to_time)
    if _find(db, "Alarm", token, time=from_time) is None:
        # exceptions.json records this API's message with "agenda" (upstream's wording)
        raise ApiError(f"You have no agenda at time : {from_time}")
    return "success"


@api("QueryAlarm")
def query_alarm(db: Session, token: str, time: str) -> dict[str, Any]:
    return _alarm_record(db, token, time)


# ---- Reminder -----------------------------------------------------------------------------------------

@api("AddReminder", check=_reminder_check)
def add_reminder(db: Session, token: str, content: str, time: str) -> str:
    _parse_time(time)
    _require(content, "Content should not be null")
    return _store(db, "Reminder", token, content=content, time=time)


def _reminder_record(db: Session, token: str, content: str, time: str) -> dict[str, Any]:
    """The user's reminder about `content` or at `time`; upstream requires both to be given."""
    _parse_time(time)
    _require(content, "Content should not be null")
    record = _find(db, "Reminder", token, content=content, time=time)
    if record is None:
        raise ApiError(f"You have no reminder about {content} or at time : {time}")
    return record


@api("DeleteReminder", check=_delete_check("time"))
def delete_reminder(db: Session, token: str, content: str, time: str) -> str:
    return _drop(db, "Reminder", _reminder_record(db, token, content, time))


@api("ModifyReminder", check=_reminder_check)
def modify_reminder(db: Session, token: str, content: str, time: str) -> str:
    _reminder_record(db, token, content, time)
    return "success"


@api("QueryReminder", check=_reminder_check)
def query_reminder(db: Session, token: str, content: str, time: str) -> dict[str, Any]:
    return _reminder_record(db, token, content, time)


# ---- Meeting ------------------------------------------------------------------------------------------

@api("AddMeeting", check=_meeting_check)
def add_meeting(db: Session, token: str, meeting_topic: str, start_time: str, end_time: str, location: str,
                attendees: list) -> str:
    _parse_time(start_time)
    _parse_time(end_time)
    _require(meeting_topic, "Meeting Topic should not be null")
    return _store(db, "Meeting", token, meeting_topic=meeting_topic, start_time=start_time, end_time=end_time,
                  location=location, attendees=attendees)


def _meeting_record(db: Session, token: str, meeting_topic: str, start_time: str, end_time: str) -> dict[str, Any]:
    """The user's meeting about `meeting_topic` or starting at `start_time`; either may be empty, not both."""
    if start_time:
        _parse_time(start_time)
    if end_time:
        _parse_time(end_time)
    if meeting_topic.strip() == "" and not start_time:
        raise ApiError("Meeting Topic and start_time should not be null both")
    record = _find(db, "Meeting", token, meeting_topic=meeting_topic, start_time=start_time)
    if record is None:  # one of the two is given (checked above), so this raises
        _not_found([(meeting_topic, f"You have no meeting about {meeting_topic}"),
                          (start_time, f"You have no meeting at time : {start_time}")])
    return record


# Upstream's DeleteMeeting check is DeleteReminder's, comparing `input['time']` when both calls succeed;
# a meeting has no `time` parameter, so upstream raises KeyError there and its evaluator counts every
# successful DeleteMeeting call wrong, the gold call included. We compare `start_time`, the meeting's time,
# which is what that check means to compare.
@api("DeleteMeeting", check=_delete_check("start_time"))
def delete_meeting(db: Session, token: str, meeting_topic: str, start_time: str, end_time: str, location: str,
                   attendees: list) -> str:
    return _drop(db, "Meeting", _meeting_record(db, token, meeting_topic, start_time, end_time))


@api("ModifyMeeting", check=_meeting_check)
def modify_meeting(db: Session, token: str, meeting_topic: str, start_time: str, end_time: str, location: str,
                   attendees: list) -> str:
    _meeting_record(db, token, meeting_topic, start_time, end_time)
    return "success"


@api("QueryMeeting", check=_meeting_check)
def query_meeting(db: Session, token: str, meeting_topic: str, start_time: str, end_time: str, location: str,
                  attendees: list) -> dict[str, Any]:
    return _meeting_record(db, token, meeting_topic, start_time, end_time)
