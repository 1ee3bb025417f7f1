"""Health APIs: RecordHealthData, QueryHealthData, EmergencyKnowledge, SymptomSearch, and the hospital
registrations AppointmentRegistration, QueryRegistration, ModifyRegistration, CancelRegistration
(over HealthData.json, Symptom.json, Appointments.json).

Most upstream checks compare normalised arguments (stripped names, upper-cased ids, re-printed dates)
rather than the raw input; those APIs carry their own `check`.
"""
from __future__ import annotations

import datetime
import random
from typing import Any

from genenv_pl.envs.api_bank_sim.core import ApiError, Result, Session, api, comparable_time, upstream_time

# The parameter types of upstream's API classes (`apis/*.py` `input_parameters`); all_apis.csv
# describes other variants of these APIs (see `account.PARAMETERS`).
PARAMETERS: dict[str, dict[str, str]] = {
    "RecordHealthData": {"user_id": "str", "time": "str", "health_data": "list"},
    "QueryHealthData": {"user_id": "str", "start_time": "str", "end_time": "str"},
    "EmergencyKnowledge": {"symptom": "str"},
    "SymptomSearch": {"symptom": "str"},
    "AppointmentRegistration": {"patient_name": "str", "date": "str", "doctor_name": "str"},
    "QueryRegistration": {"patient_name": "str", "date": "str"},
    "ModifyRegistration": {"appointment_id": "str", "new_appointment_date": "str", "new_appointment_doctor": "str"},
    "CancelRegistration": {"appointment_id": "str"},
}

DAY = "%Y-%m-%d"
MOMENT = "%Y-%m-%d %H:%M:%S"


def _parsed(text: str, fmt: str) -> str:
    """`upstream_time`, with strptime's failure reported as the API's exception, as upstream does."""
    try:
        return upstream_time(text, fmt)
    except ValueError as e:
        raise ApiError(str(e)) from None


def _same_result(response: Result, gold: Result) -> bool:
    return response.get("output") == gold.get("output") and response.get("exception") == gold.get("exception")


def _stripped(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


# --- health records ---------------------------------------------------------------------------

def _health_items(health_data: Any) -> list | None:
    """The records as upstream's check compares them: name and value as text, in a fixed order."""
    try:
        items = [{"name": str(i["name"]), "value": str(i["value"])} for i in health_data]
    except (KeyError, TypeError):
        return None  # upstream's check fails on such data
    return sorted(items, key=str)


def _record_check(response: Result, gold: Result) -> bool:
    """Upstream compares the upper-cased stripped user id, the normalised time, the health data as
    text in any order, the output and the exception."""
    r, g = response["input"], gold["input"]
    items = _health_items(r.get("health_data"))
    return (str(r.get("user_id", "")).upper().strip() == str(g.get("user_id", "")).upper().strip()
            and comparable_time(r.get("time"), MOMENT) == comparable_time(g.get("time"), MOMENT)
            and items is not None and items == _health_items(g.get("health_data"))
            and _same_result(response, gold))


@api("RecordHealthData", check=_record_check, defaults={"health_data": None})
def record_health_data(db: Session, user_id: str, time: str, health_data: list | None = None) -> str:
    if not user_id.upper().strip():
        raise ApiError("The user id cannot be empty.")
    _parsed(time, MOMENT)
    if not health_data:
        raise ApiError("The health data cannot be empty.")
    names = set()
    for item in health_data:
        if "name" not in item:
            raise ApiError("The health data has invalid format.")
        if item["name"] in names:
            raise ApiError("The health data cannot contain duplicate items.")
        names.add(item["name"])
    if any("value" not in item for item in health_data):
        raise ApiError("'value'")  # upstream reads item['value'] while storing: its KeyError's text
    # stored as HealthData.json keeps records, for the dialogue's later queries
    record = {"time": _parsed(time, MOMENT), **{item["name"]: item["value"] for item in health_data}}
    db.table("HealthData").setdefault(user_id.upper().strip(), []).append(record)
    return "success"


def _health_key(args: dict) -> tuple:
    user = str(args.get("user_id", "")).upper().strip() or None
    return user, comparable_time(args.get("start_time"), MOMENT), comparable_time(args.get("end_time"), MOMENT)


def _query_health_check(response: Result, gold: Result) -> bool:
    """Upstream compares the upper-cased user id, the normalised start and end times, the output and
    the exception."""
    return _health_key(response["input"]) == _health_key(gold["input"]) and _same_result(response, gold)


@api("QueryHealthData", check=_query_health_check)
def query_health_data(db: Session, user_id: str, start_time: str, end_time: str) -> list:
    user = user_id.upper().strip()
    if not user:
        raise ApiError("The user id cannot be empty.")
    start, end = _span(start_time, end_time)
    records = db.table("HealthData")
    if user not in records:
        raise ApiError("The user id does not exist.")
    found = [r for r in records[user] if start <= datetime.datetime.strptime(r["time"], MOMENT) <= end]
    if not found:
        raise ApiError("There is no health data in the given time span.")
    return found


def _span(start_time: str, end_time: str) -> tuple[datetime.datetime, datetime.datetime]:
    """Both ends parsed; two bad ends are reported together, as upstream does."""
    errors, ends = [], []
    for text in (start_time, end_time):
        try:
            ends.append(datetime.datetime.strptime(upstream_time(text, MOMENT), MOMENT))
        except ValueError as e:
            errors.append(str(e))
    if errors:
        raise ApiError("; ".join(errors))
    if ends[0] > ends[1]:
        raise ApiError("The start time cannot be later than the end time.")
    return ends[0], ends[1]


# --- symptoms ---------------------------------------------------------------------------------

def _symptom_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped lower-cased symptom, the output and the exception."""
    mine = str(response["input"].get("symptom", "")).strip().lower()
    return bool(mine) and mine == str(gold["input"].get("symptom", "")).strip().lower() and _same_result(response, gold)


def _conditions(db: Session, symptom: str) -> list[dict]:
    # Symptom.json is keyed by lower-case symptom; upstream matches the stripped lower-cased text
    key = symptom.strip().lower()
    if not key:
        raise ApiError("The symptom cannot be empty.")
    table = db.table("Symptom")
    if key not in table:
        raise ApiError("The symptom does not exist.")
    return table[key]


@api("EmergencyKnowledge", check=_symptom_check)
def emergency_knowledge(db: Session, symptom: str) -> list:
    # Upstream's empty-symptom branch crashes on its own message (it lower-cases an Exception); the
    # message it meant, "The symptom cannot be empty.", is reported here.
    return [{"name": c["name"], "aid": c["aid"]} for c in _conditions(db, symptom)]


@api("SymptomSearch", check=_symptom_check)
def symptom_search(db: Session, symptom: str) -> list:
    return [{"name": c["name"], "description": c["description"]} for c in _conditions(db, symptom)]


# --- registrations ----------------------------------------------------------------------------

def _new_appointment_id(appointments: dict, key: str) -> str:
    # upstream draws a random 8-digit id not yet taken; its check never compares the id itself. Seeded by the
    # call, as account.py's tokens: the same tasks however often, and wherever, they are built
    rng = random.Random(f"appointment:{key}")
    while True:
        candidate = str(rng.randint(10000000, 99999999))
        if candidate not in appointments:
            return candidate


def _registration_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped names and normalised date, then only the exception (the id is
    random); a response with an id where the gold has none is wrong."""
    r, g = response["input"], gold["input"]
    if (_stripped(r.get("patient_name")) != _stripped(g.get("patient_name"))
            or comparable_time(r.get("date"), DAY) != comparable_time(g.get("date"), DAY)
            or _stripped(r.get("doctor_name")) != _stripped(g.get("doctor_name"))):
        return False
    if gold.get("output") is None and response.get("output") is not None:
        return False
    return response.get("exception") == gold.get("exception")


@api("AppointmentRegistration", check=_registration_check)
def appointment_registration(db: Session, patient_name: str, date: str, doctor_name: str) -> str:
    patient, doctor = patient_name.strip(), doctor_name.strip()
    if not patient or not doctor:
        raise ApiError("Patient name or doctor name cannot be empty.")
    day = _parsed(date, DAY)
    appointments = db.table("Appointments")
    for booked in _booked(appointments, patient, day).values():
        if booked["doctor_name"] == doctor:
            raise ApiError("This appointment has already been registered.")
        raise ApiError("This patient has already been registered in this day.")
    # replayed: the id the dialogue was given, which its later calls use
    appointment_id = str(db.recorded) if db.recorded else _new_appointment_id(appointments, f"{patient}|{day}|{doctor}")
    appointments[appointment_id] = {"patient_name": patient, "date": day, "doctor_name": doctor}
    return appointment_id


def _booked(appointments: dict, patient: str, day: str) -> dict:
    """The appointments of `patient` on `day`, by id (dates compared normalised, as upstream does)."""
    return {key: a for key, a in appointments.items()
            if a["patient_name"] == patient and comparable_time(a["date"], DAY) == day}


def _query_registration_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped patient name and normalised date, the output and the exception."""
    r, g = response["input"], gold["input"]
    return (_stripped(r.get("patient_name")) == _stripped(g.get("patient_name"))
            and comparable_time(r.get("date"), DAY) == comparable_time(g.get("date"), DAY)
            and _same_result(response, gold))


@api("QueryRegistration", check=_query_registration_check)
def query_registration(db: Session, patient_name: str, date: str) -> dict:
    found = _booked(db.table("Appointments"), patient_name.strip(), _parsed(date, DAY))
    if not found:
        raise ApiError("No appointments found.")
    return found


def _modify_key(args: dict) -> tuple:
    day = args.get("new_appointment_date")
    return (_stripped(args.get("appointment_id")),
            None if day is None else comparable_time(day, DAY),
            _stripped(args.get("new_appointment_doctor")))


def _modify_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped id and doctor, the normalised date (None when not given), the
    output and the exception."""
    return _modify_key(response["input"]) == _modify_key(gold["input"]) and _same_result(response, gold)


@api("ModifyRegistration", check=_modify_check,
     defaults={"new_appointment_date": None, "new_appointment_doctor": None})
def modify_registration(db: Session, appointment_id: str, new_appointment_date: str | None = None,
                        new_appointment_doctor: str | None = None) -> str:
    appointments = db.table("Appointments")
    key = appointment_id.strip()
    if key not in appointments:
        raise ApiError("The appointment ID does not exist.")
    doctor = None if new_appointment_doctor is None else new_appointment_doctor.strip()
    if doctor == "":
        raise ApiError("Fail because the doctor name is empty.")
    day = None if new_appointment_date is None else _parsed(new_appointment_date, DAY)
    _require_change(appointments[key], day, doctor)
    return "success"


def _require_change(current: dict, day: str | None, doctor: str | None) -> None:
    """Upstream's refusals, in its order: nothing given, or a given field equal to the current one
    (with both given and both unchanged reported as no modification)."""
    same_day = day is not None and day == current["date"]
    same_doctor = doctor is not None and doctor == current["doctor_name"]
    if (day is None and doctor is None) or (same_day and same_doctor):
        raise ApiError("Fail because no modification is made.")
    if same_day:
        raise ApiError("Fail because date is not changed.")
    if same_doctor:
        raise ApiError("Fail because doctor is not changed.")


def _cancel_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped appointment id, the output and the exception."""
    return (_stripped(response["input"].get("appointment_id")) == _stripped(gold["input"].get("appointment_id"))
            and _same_result(response, gold))


@api("CancelRegistration", check=_cancel_check)
def cancel_registration(db: Session, appointment_id: str) -> str:
    if appointment_id.strip() not in db.table("Appointments"):
        raise ApiError("The appointment ID is incorrect.")
    return "success"
