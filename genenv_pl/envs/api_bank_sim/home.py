"""Hotel, smart-home and music APIs: BookHotel, QueryScene, DeleteScene, TimedSwitch, CancelTimedSwitch,
PlayMusic (over Hotel.json, Scenes.json, TimeSwitch.json).

A booking, a deleted scene and a set or cancelled timed switch change the call's `Session`, which the
dialogue's later calls see when its earlier calls are replayed (see `core`).
"""
from __future__ import annotations

import datetime
from typing import Any

from genenv_pl.envs.api_bank_sim.core import ApiError, Result, Session, api, comparable_time, upstream_time

# The parameter types of upstream's API classes (`input_parameters`), which upstream's ToolManager
# converts arguments with; all_apis.csv describes other variants of these APIs (see `account.PARAMETERS`).
# TimedSwitch and CancelTimedSwitch take `device_id`: upstream's current classes name the parameter
# `name`, but every recorded call (and exceptions.json: 'device_id cannot be empty.') uses `device_id`.
PARAMETERS: dict[str, dict[str, str]] = {
    "BookHotel": {"hotel_name": "str", "check_in_time": "str", "check_out_time": "str", "room_count": "int",
                  "adult_count": "int", "child_count": "int"},
    "QueryScene": {"name": "str"},
    "DeleteScene": {"name": "str"},
    "TimedSwitch": {"device_id": "str", "time": "str", "on": "bool"},
    "CancelTimedSwitch": {"device_id": "str", "time": "str"},
    "PlayMusic": {"music_name": "str"},
}


# --- hotel ------------------------------------------------------------------------------------

def _day(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%d")  # ValueError: strptime's message, upstream's exception


@api("BookHotel")  # upstream BookHotel's check: input, output and exception (the default)
def book_hotel(db: Session, hotel_name: str, check_in_time: str, check_out_time: str, room_count: int,
               adult_count: int, child_count: int) -> str:
    """Orders rooms; the order's id is the next number after the orders so far."""
    try:
        check_in, check_out = _day(check_in_time), _day(check_out_time)
    except ValueError as e:
        raise ApiError(str(e)) from None
    if adult_count > 2 and room_count == 1:
        raise ApiError("The number of adults is greater than 2. Two rooms are ordered.")
    orders = db.table("Hotel")
    for order in orders.values():
        # the same hotel (its name as given) is taken when either end of the stay falls in an order's stay
        if order["hotel_name"] == hotel_name:
            start, end = _day(order["check_in_time"]), _day(order["check_out_time"])
            if start <= check_in < end or start < check_out <= end:
                raise ApiError("The room is not available.")
    order_id = str(len(orders) + 1)
    orders[order_id] = {"hotel_name": hotel_name, "check_in_time": check_in_time, "check_out_time": check_out_time,
                        "room_count": room_count, "adult_count": adult_count, "child_count": child_count}
    return order_id


# --- scenes -------------------------------------------------------------------------------------

def _scene_check(response: Result, gold: Result) -> bool:
    # upstream QueryScene's and DeleteScene's check_api_call_correctness: the name (stripped, case
    # ignored), output, exception
    return (response["input"]["name"].strip().lower() == gold["input"]["name"].strip().lower()
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


def _scene(db: Session, name: str, missing: str) -> str:
    """The scene's key in Scenes.json (name stripped, case ignored); `missing` is that API's message."""
    key = name.strip().lower()
    if not key:
        raise ApiError("Scene name cannot be empty.")
    if key not in db.table("Scenes"):
        raise ApiError(missing)
    return key


@api("QueryScene", check=_scene_check)
def query_scene(db: Session, name: str) -> list:
    """The devices of a scene of Scenes.json (name stripped, case ignored)."""
    return db.table("Scenes")[_scene(db, name, "Scene not found.")]


@api("DeleteScene", check=_scene_check)
def delete_scene(db: Session, name: str) -> str:
    """Deletes a scene of Scenes.json (name stripped, case ignored)."""
    del db.table("Scenes")[_scene(db, name, "The scene does not exist.")]
    return "success"


# --- timed switches ------------------------------------------------------------------------------

def _switch_time(text: str) -> str:
    return upstream_time(text, "%Y-%m-%d %H:%M:%S")


def _comparable_time(text: Any) -> Any:
    return comparable_time(text, "%Y-%m-%d %H:%M:%S")


def _timed_switch_check(response: Result, gold: Result) -> bool:
    # upstream TimedSwitch.check_api_call_correctness (on `device_id`, see PARAMETERS): the device
    # (stripped, case ignored), the normalised time, on, output, exception
    r, g = response["input"], gold["input"]
    return (r["device_id"].strip().lower() == g["device_id"].strip().lower()
            and _comparable_time(r["time"]) == _comparable_time(g["time"]) and r["on"] == g["on"]
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


def _device_and_time(device_id: str, time: str) -> tuple[str, str]:
    """The device's key in TimeSwitch.json (stripped, lower-cased as upstream does) and the normalised time."""
    device = device_id.strip().lower()
    if not device:
        raise ApiError("device_id cannot be empty.")
    try:
        return device, _switch_time(time)
    except ValueError as e:
        raise ApiError(str(e)) from None


@api("TimedSwitch", check=_timed_switch_check)
def timed_switch(db: Session, device_id: str, time: str, on: bool) -> str:
    """Schedules switching a device on or off in TimeSwitch.json (devices by their key there, stripped
    and lower-cased as upstream does): a new device or time is added, an existing time of the device
    gets the new on/off, so any valid call succeeds."""
    device, when = _device_and_time(device_id, time)
    switches = db.table("TimeSwitch").setdefault(device, [])
    for switch in switches:
        if switch["time"] == when:
            switch["on"] = on
            break
    else:
        switches.append({"time": when, "on": on})
    return "success"


def _cancel_check(response: Result, gold: Result) -> bool:
    # upstream CancelTimedSwitch.check_api_call_correctness (on `device_id`): the device (stripped,
    # case ignored), the normalised time, output, exception
    r, g = response["input"], gold["input"]
    return (r["device_id"].strip().lower() == g["device_id"].strip().lower()
            and _comparable_time(r["time"]) == _comparable_time(g["time"])
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


@api("CancelTimedSwitch", check=_cancel_check)
def cancel_timed_switch(db: Session, device_id: str, time: str) -> str:
    """Cancels a device's timed switch at that time, from TimeSwitch.json (devices by their key there,
    stripped and lower-cased as upstream does)."""
    device, when = _device_and_time(device_id, time)
    switches = db.table("TimeSwitch")
    if device not in switches:
        raise ApiError("device_id does not exist.")
    for i, switch in enumerate(switches[device]):
        if switch["time"] == when:
            del switches[device][i]
            return "success"
    raise ApiError("time does not exist.")


# --- music ----------------------------------------------------------------------------------------

@api("PlayMusic",
     # upstream PlayMusic.check_api_call_correctness: the output only
     check=lambda response, gold: response["output"] == gold["output"])
def play_music(db: Session, music_name: str) -> str:
    """The url scheme that makes the music player play the music (name lower-cased)."""
    name = music_name.lower().strip()
    if not name:
        raise ApiError("The music name cannot be empty.")
    return f"music://{name}"
