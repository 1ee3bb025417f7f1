"""ToolSearcher: the API library's best match for the keywords (level 2's retrieval step).

Upstream ranks with sentence embeddings, which are not available offline; a lexical ranking (BM25)
stands in, see `_ToolIndex`. `knowledge.SearchEngine` shares the BM25 scorer.
"""
from __future__ import annotations

import copy
import functools
import math
import re
from collections import Counter
from typing import Any

from genenv_pl.envs.api_bank_sim.core import ApiError, Session, api

PARAMETERS: dict[str, dict[str, str]] = {"ToolSearcher": {"keywords": "str"}}


# --- ToolSearcher -----------------------------------------------------------------------------

# The library ToolSearcher searches: every API this simulator runs, as upstream's classes describe
# themselves (name, description, input and output parameters: (type, description)). Where a shipped
# ToolSearcher result shows an API's description, that text is used (it is what upstream's class said
# when the dialogues were recorded, and upstream's later classes differ in places); the others come from
# the API specs upstream publishes with the benchmark (`toolsearcher-free/data/processed/tool_catalog.json`),
# except that TimedSwitch and CancelTimedSwitch take `device_id`, as every recorded call of them does.
# Upstream's library also holds AddScene, ModifyScene, ImageCaption, SpeechRecognition and CheckToken,
# which no shipped dialogue calls and this simulator does not run, so it does not offer them either.
_MEETING = {
    "token": ("str", "User's token."),
    "meeting_topic": ("str", "The title of the meeting, no more than 50 characters."),
    "start_time": ("str", "The start time of the meeting, in the pattern of %Y-%m-%d %H:%M:%S"),
    "end_time": ("str", "The end time of the meeting, in the pattern of %Y-%m-%d %H:%M:%S"),
    "location": ("str", "The location where the meeting to be held, no more than 100 characters."),
    "attendees": ("list(str)", "The attendees of the meeting, including names, positions and other information."),
}
_AGENDA = {
    "token": ("str", "User's token."),
    "content": ("str", "The content of the agenda."),
    "time": ("str", "The time for agenda. Format: %Y-%m-%d %H:%M:%S"),
    "location": ("str", "The location of the agenda."),
}
_REMINDER = {
    "token": ("str", "User's token."),
    "content": ("str", "The content of the conference."),
    "time": ("str", "The time for conference. Format: %Y-%m-%d %H:%M:%S"),
}
_STATUS = {"status": ("str", "success or failed")}
_LIBRARY: list[tuple[str, str, dict[str, tuple[str, str]], dict[str, tuple[str, str]]]] = [
    ("AddAgenda", "The API for adding a schedule item includes parameters for token, content, time, and location.",
     _AGENDA, _STATUS),
    ("AddAlarm", "The API for setting an alarm includes a parameter for the time.",
     {"token": ("str", "User's token."), "time": ("str", "The time for alarm. Format: %Y-%m-%d %H:%M:%S")}, _STATUS),
    ("AddMeeting", "This API allows users to make a reservation for a meeting and store the meeting information "
     "(e.g., topic, time, location, attendees) in the database.", _MEETING, _STATUS),
    ("AddReminder", "Add a reminder API that takes three parameters - 'token'，'content' and 'time'. The 'token' "
     "parameter refers to the user's token and the 'content' parameter refers to the description of the reminder "
     "and the 'time' parameter specifies the time at which the reminder should be triggered.", _REMINDER, _STATUS),
    ("AppointmentRegistration", "This API registers an appointment of hospital.",
     {"patient_name": ("str", "The name of patient."),
      "date": ("str", "The date of appointment. Format be like %Y-%m-%d"),
      "doctor_name": ("str", "The name of appointed doctor.")},
     {"appointment_id": ("str", "The ID of appointment.")}),
    ("BookHotel", "This API orders a hotel room. Two rooms are ordered if the number of adults is greater than 2. "
     "Only one order can be made at same time.",
     {"hotel_name": ("str", "The name of the hotel."),
      "check_in_time": ("str", "The time to check in. Format: %Y-%m-%d"),
      "check_out_time": ("str", "The time to check out. Format: %Y-%m-%d"),
      "room_count": ("int", "The number of rooms to order."),
      "adult_count": ("int", "The number of adults."),
      "child_count": ("int", "The number of children.")},
     {"order_id": ("str", "The ID of the order.")}),
    ("Calculator",
     "This API provides basic arithmetic operations: addition, subtraction, multiplication, and division.",
     {"formula": ("str", "The formula that needs to be calculated. Only integers are supported. Valid operators are "
                  "+, -, *, /, and (, ). For example, '(1 + 2) * 3'.")},
     {"result": ("float", "The result of the formula.")}),
    ("CancelRegistration", "This API cancels the registration of a patient given appointment ID.",
     {"appointment_id": ("str", "The ID of appointment.")}, {"status": ("str", "The status of cancellation.")}),
    ("CancelTimedSwitch", "Cancels a timed switch for a smart device.",
     {"device_id": ("str", "The ID of the smart device."),
      "time": ("str", "The time to switch the device on or off. Format: %Y-%m-%d %H:%M:%S")},
     {"status": ("str", "Whether the time switch is successful.")}),
    ("DeleteAccount", "Delete an account.", {"token": ("str", "The token of the user.")}, _STATUS),
    ("DeleteAgenda", "The API for deleting a schedule item includes parameters for token, content, time, and location.",
     _AGENDA, _STATUS),
    ("DeleteAlarm", "The API for removing an alarm includes a parameter for the time.",
     {"token": ("str", "User's token."), "time": ("str", "The time for alarm. Format: %Y-%m-%d %H:%M:%S")}, _STATUS),
    ("DeleteMeeting", "This API allows users to delete a reservation for a meeting and remove the meeting "
     "information in the database.", _MEETING, _STATUS),
    ("DeleteReminder", "The API for deleting a reminder item includes content and time.", _REMINDER, _STATUS),
    ("DeleteScene", "This API deletes a scene by its name.", {"name": ("str", "The name of the scene.")},
     {"status": ("str", "Whether the deletion is successful.")}),
    ("Dictionary", "This API searches the dictionary for a given keyword.",
     {"keyword": ("str", "The keyword to search.")},
     {"results": ("list", 'The list of results. Format be like [{"partOfSpeech": "xxx", "definitions": '
                  '[{"definition": "xxx", "example": "xxx", "synonyms": ["xxx", "xxx"]}, ...]')}),
    ("DocumentQA", "This API answers the question from a given document url.",
     {"url": ("str", "The url to download the document. It should end with .txt."),
      "question": ("str", "The question to be answered.")},
     {"answer": ("str", "The answer to the question.")}),
    ("EmergencyKnowledge", "This API searches for a given symptom.", {"symptom": ("str", "The symptom to search.")},
     {"results": ("list", 'The list of results. Format be like [{"name":possible disease name, '
                  '"aid": first-aid method},...]')}),
    ("ForgotPassword", "Sends an email to the user with a link to reset the password. Need call twice, first with "
     "'Forgot Password' status to get the verification code, then call again with 'Verification Code' status to "
     "change the password. Must pass the name of the parameters when calling the API, like "
     "ForgotPassword(status='Forgot Password', username='username').",
     {"status": ("str", "'Forgot Password' for first call, after get the verification code, call again with "
                 "'Verification Code' to change the password."),
      "username": ("str", "The username of the user. Only needed for the first call."),
      "email": ("str", "The email of the user. Only needed for the first call."),
      "verification_code": ("int", "The verification code sent to the user. Only needed for the second call."),
      "new_password": ("str", "The new password of the user. Only needed for the second call.")}, _STATUS),
    ("GetToday", "This API gets the current date.", {}, {"date": ("str", "The current date. Format: %Y-%m-%d")}),
    ("GetUserToken", "Get the user token.",
     {"username": ("str", "The username of the user."), "password": ("str", "The password of the user.")},
     {"token": ("str", "The token of the user.")}),
    ("ModifyAgenda",
     "The API for modifying a schedule item includes parameters for token, content, time, and location.",
     {"token": ("str", "User's token."), "content": ("str", "The content of the agenda."),
      "time": ("str", "The new time for agenda. Format: %Y-%m-%d %H:%M:%S"),
      "location": ("str", "The new location of the agenda.")}, _STATUS),
    ("ModifyAlarm", "The API for modifying an alarm includes a parameter for the from_time to to_time.",
     {"token": ("str", "User's token."),
      "from_time": ("str", "The time for alarm which changed from. Format: %Y-%m-%d %H:%M:%S"),
      "to_time": ("str", "The time for alarm which changed to. Format: %Y-%m-%d %H:%M:%S")}, _STATUS),
    ("ModifyMeeting", "This API allows users to modify a reservation for a meetingFunction：Delete user's reservation "
     "for a meeting.Exception Handling：1. If the modification is successful, return a success message.2. If the "
     "modification fails, return a corresponding error message.", _MEETING, _STATUS),
    ("ModifyPassword", "The API for modifying the password of the account.",
     {"token": ("str", "The token of the user."), "old_password": ("str", "The old password of the user."),
      "new_password": ("str", "The new password of the user.")}, _STATUS),
    ("ModifyRegistration", "This API modifies the registration of a patient given appointment ID.",
     {"appointment_id": ("str", "The ID of appointment."),
      "new_appointment_date": ("str", "The new appointment date. Format: %Y-%m-%d."),
      "new_appointment_doctor": ("str", "The new appointment doctor.")},
     {"status": ("str", "The status of modification.")}),
    ("ModifyReminder", "Modify a reminder API that takes three parameters - 'token'，'content' and 'time'. The "
     "'token' parameter refers to the user's token and the 'content' parameter refers to the description of the "
     "reminder and the 'time' parameter specifies the time at which the reminder should be triggered.",
     _REMINDER, _STATUS),
    ("OpenBankAccount", "This is an API for opening a bank account for a user, given the account, password and name.",
     {"account": ("str", "The account for the user."), "password": ("str", "The password."),
      "name": ("str", "account holder name.")}, _STATUS),
    ("PlayMusic", "This API triggers a music player to play music.",
     {"music_name": ("str", "The name of the music to play.")},
     {"status": ("str", "The corresponding url scheme to trigger the music player.")}),
    ("QueryAgenda", "The API for getting a schedule item includes parameters for token, content, time, and location.",
     _AGENDA, {"info": ("json", "agenda info including username and time")}),
    ("QueryAlarm", "The API for querying alarm clock, help user to check the alarm clock they have set.",
     {"token": ("str", "User's token."), "time": ("str", "The time for alarm. Format: %Y-%m-%d %H:%M:%S")},
     {"info": ("json", "alarm info including username, time, content and location")}),
    ("QueryBalance", "This API queries the balance of a given user.", {"token": ("str", "The token of the user.")},
     {"balance": ("float", "The balance of the user.")}),
    ("QueryHealthData", "This API queries the recorded health data in database of a given user and time span.",
     {"user_id": ("str", "The user id of the given user. Cases are ignored."),
      "start_time": ("str", "The start time of the time span. Format: %Y-%m-%d %H:%M:%S"),
      "end_time": ("str", "The end time of the time span. Format: %Y-%m-%d %H:%M:%S")},
     {"health_data": ("list", "The health data of the given user and time span.")}),
    ("QueryHistoryToday", "This API queries the history of a given user today.",
     {"date": ("str", "The date of the history. Format: %m-%d")},
     {"history": ("list", "The history of the user today.")}),
    ("QueryMeeting", "This API allows users to query a reservation for a meeting.Function：Query infomation for a "
     "meeting.Exception Handling：1. If the Query is successful, return a meeting infomation with json.2. If the "
     "Query fails, return a error message.", _MEETING, {"meeting_info": ("json", "meeting info")}),
    ("QueryRegistration", "This API queries the registration of a patient given patient ID.",
     {"patient_name": ("str", "The name of patient."),
      "date": ("str", "The date of appointment. Format be like %Y-%m-%d")},
     {"appointments": ("list", 'The dict where from appointment_id to a list like ["patient_name":xxx, '
                       '"date":xxx, "doctor_name":xxx]')}),
    ("QueryReminder", "The API for querying a reminder item includes content and time.",
     {"token": ("str", "User's token."), "content": ("str", "The content of the reminder."),
      "time": ("str", "The time for the reminder. Format: %Y-%m-%d %H:%M:%S")},
     {"reminder_info": ("json", "remind info")}),
    ("QueryScene", "This API queries a scene of smart home system, given the scene name",
     {"name": ("str", "The name of the scene.")},
     {"devices": ("list", "The list of smart devices, containing the name and description.")}),
    ("QueryStock", "This API queries the stock price of a given stock.",
     {"stock_code": ("str", "The stock code of the given stock."),
      "date": ("str", "The date of the stock price. Format: %Y-%m-%d")},
     {"stock_price": ("float", "The stock price of the given stock.")}),
    ("RecordHealthData", "This API records the health history of a patient given user ID, time and health data.",
     {"user_id": ("str", "The ID of user."), "time": ("str", "The time of health data. Format: %Y-%m-%d %H:%M:%S"),
      "health_data": ("list", "The health data, with the format like [{'name': 'blood_pressure', "
                      "'value': '120/80'}, {'name': 'heart_rate', 'value': '80'}]")},
     {"status": ("str", "The status of recording.")}),
    ("RegisterUser", "The API for registering a account, given the username, password and email.",
     {"username": ("str", "The username of the user."), "password": ("str", "The password of the user."),
      "email": ("str", "The email of the user.")}, {"token": ("str", "The token of the user.")}),
    ("SearchEngine", "This API searches for a given keyword for search engine.",
     {"keyword": ("str", "The keyword to search.")}, {"results": ("list", "The list of results.")}),
    ("SendEmail", "This API for sending email, given the receiver, subject and content.",
     {"receiver": ("str", "The receiver address of the email."),
      "subject": ("str", "The subject address of the email."),
      "content": ("str", "The content of the email.")},
     {"status": ("str", "The status of the email.")}),
    ("SymptomSearch", "This API searches for a given symptom.", {"symptom": ("str", "The symptom to search.")},
     {"results": ("list", 'The list of results. Format be like [{"name":possible disease name, '
                  '"description": disease details},...]')}),
    ("TimedSwitch", "This API for setting a timed switch for a smart device.",
     {"device_id": ("str", "The ID of the smart device."),
      "time": ("str", "The time to switch the device on or off. Format: %Y-%m-%d %H:%M:%S"),
      "on": ("bool", "Whether to switch the device on or off.")},
     {"status": ("str", "Whether the time switch is successful.")}),
    ("Translate", "The API for translating text from source language to target language.",
     {"src": ("str", "The text to be translated."),
      "src_lang": ("str", "[Optional] The source language to translate from. Default is auto."),
      "tgt_lang": ("str", "[Optional] The target language to translate to. Default is english/en.")},
     {"translated_text": ("str", "The translated text.")}),
    ("Wiki", "This API for searching a keyword in Wikipedia.", {"keyword": ("str", "The keyword to search.")},
     {"results": ("dict", 'The list of results. Format be like {"url": "xxx", "summary": "xxx", "content": "xxx"}')}),
]


def _spec(name: str, description: str, inputs: dict, outputs: dict) -> dict[str, Any]:
    return {"name": name, "description": description,
            "input_parameters": {k: {"type": t, "description": d} for k, (t, d) in inputs.items()},
            "output_parameters": {k: {"type": t, "description": d} for k, (t, d) in outputs.items()}}


def _search_text(name: str, description: str) -> str:
    """Upstream's text to match a query against: the class name split at capitals and lowercased,
    followed directly (no space) by the description."""
    return re.sub(r"([A-Z])", lambda m: " " + m.group(1).lower(), name).strip() + description


_STOPWORDS = frozenset(
    "a an and are as at be by can for from given in includes is it its of on or that the their them this to "
    "which with api apis".split())


def _stem(word: str) -> str:
    """A light suffix stripper, so that 'booking', 'books' and 'book' or 'calculate' and 'calculator'
    meet; enough for keywords against one-line descriptions."""
    for suffix in ("ations", "ation", "ings", "ing", "ors", "or", "ers", "er", "ies", "es", "ed", "s", "e"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _terms(text: str) -> list[str]:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)  # QueryHealthData, 'alarmThe' -> separate words
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS]


def _bm25_scores(documents: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75,
                 epsilon: float = 0.25) -> list[float]:
    """Okapi BM25 of each document for the query, with the parameters and idf floor of rank_bm25's
    BM25Okapi (the ranker of upstream's SearchEngine): idf = ln((N - n + 0.5) / (n + 0.5)), and a
    negative idf replaced by epsilon times the mean idf of the corpus' terms."""
    n_docs = len(documents)
    lengths = [len(d) for d in documents]
    avgdl = sum(lengths) / n_docs
    freqs = [Counter(d) for d in documents]
    df = Counter(term for f in freqs for term in f)
    idf = {t: math.log(n_docs - n + 0.5) - math.log(n + 0.5) for t, n in df.items()}
    floor = epsilon * sum(idf.values()) / len(idf)
    idf = {t: (v if v >= 0 else floor) for t, v in idf.items()}
    scores = [0.0] * n_docs
    for q in query:
        weight = idf.get(q, 0.0)
        for i, f in enumerate(freqs):
            tf = f.get(q, 0)
            scores[i] += weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / avgdl))
    return scores


class _ToolIndex:
    """The library's search texts as bag-of-words documents, ranked for keywords by BM25.

    Upstream ranks the library by the cosine similarity of sentence embeddings
    (sentence-transformers/paraphrase-MiniLM-L3-v2) of the keywords and of each search text, and keeps
    the first API with the highest score. No such model is available offline (nor to the standard
    library), so a lexical ranking stands in: Okapi BM25, the ranker upstream's SearchEngine uses, over
    stemmed words. It finds the API whose name and description share the keywords' words, and misses
    matches that only meaning makes (e.g. 'rash' for SymptomSearch)."""

    def __init__(self) -> None:
        self.specs = [_spec(*entry) for entry in _LIBRARY]
        self.texts = [_search_text(name, description) for name, description, _, _ in _LIBRARY]
        self.documents = [_terms(text) for text in self.texts]

    def best(self, keywords: str) -> int | None:
        scores = _bm25_scores(self.documents, _terms(keywords))
        best, best_score = None, 0.0
        for i, score in enumerate(scores):
            if score > best_score:  # strictly greater: the first of equals wins, as upstream's loop
                best, best_score = i, score
        return best


@functools.lru_cache(maxsize=None)
def _tool_index() -> _ToolIndex:
    return _ToolIndex()


@api("ToolSearcher",
     # upstream ToolSearcher.check_api_call_correctness: output and exception (the keywords are not compared)
     check=lambda response, gold: (response["output"] == gold["output"]
                                   and response["exception"] == gold["exception"]))
def tool_searcher(db: Session, keywords: str) -> Any:
    """The library's API that best matches the keywords (see `_ToolIndex`); for an API that takes a
    token, the list [GetUserToken, that API], as upstream returns it."""
    index = _tool_index()
    i = index.best(keywords)
    if i is None:
        # upstream's loop keeps None when no score beats 0 and then fails on None.pop(...); with its
        # embeddings that hardly happens, with word matching it happens whenever the keywords share
        # no word with any API
        raise ApiError("'NoneType' object has no attribute 'pop'")
    match = copy.deepcopy(index.specs[i])
    if "token" not in match["input_parameters"]:
        return match
    # upstream puts its own library record of GetUserToken first, which (unlike the copied match) still
    # carries its search text; the recorded results show that key
    token_i = next(j for j, spec in enumerate(index.specs) if spec["name"] == "GetUserToken")
    return [{**copy.deepcopy(index.specs[token_i]), "desc_for_search": index.texts[token_i]}, match]
