"""Accounts, bank and stock APIs: GetUserToken, RegisterUser, DeleteAccount, ForgotPassword,
ModifyPassword, OpenBankAccount, QueryBalance, QueryStock (over Account.json, Bank.json, Stock.json).

An API that changes state (a new user, a reset password, a deleted account) changes the call's
`Session`, which the dialogue's later calls see when its earlier calls are replayed (see `core`).
"""
from __future__ import annotations

import random
import string
from typing import Any

from genenv_pl.envs.api_bank_sim.core import ApiError, Result, Session, api, check_token, comparable_time, upstream_time

# The parameter types of upstream's API classes (`apis/*.py` `input_parameters`), which is what
# upstream's ToolManager converts arguments with. all_apis.csv describes other, unimplemented
# variants of these APIs (other parameter names), so it is no source for these.
PARAMETERS: dict[str, dict[str, str]] = {
    "GetUserToken": {"username": "str", "password": "str"},
    "RegisterUser": {"username": "str", "password": "str", "email": "str"},
    "DeleteAccount": {"token": "str"},
    "ForgotPassword": {"status": "str", "username": "str", "email": "str", "verification_code": "int",
                       "new_password": "str"},
    "ModifyPassword": {"token": "str", "old_password": "str", "new_password": "str"},
    "OpenBankAccount": {"account": "str", "password": "str", "name": "str"},
    "QueryBalance": {"token": "str"},
    "QueryStock": {"stock_code": "str", "date": "str"},
}


# --- accounts ---------------------------------------------------------------------------------

@api("GetUserToken")
def get_user_token(db: Session, username: str, password: str) -> dict:
    accounts = db.table("Account")
    if username not in accounts:
        raise ApiError("The username does not exist.")
    if accounts[username]["password"] != password:
        raise ApiError("The password is incorrect.")
    return {"token": accounts[username]["token"]}


def _random_token(key: str, length: int = 18) -> str:
    # upstream draws letters and digits and lowercases them; the value is never compared (see check). Drawn
    # from a generator seeded by the call (a str seed hashes the same in every process), so that building the
    # tasks twice, or on two ranks, gives the same tasks
    rng = random.Random(f"token:{key}")
    return "".join(rng.choices(string.ascii_letters + string.digits, k=length)).lower()


def _register_check(response: Result, gold: Result) -> bool:
    """Upstream compares input and exception only (the token is random); a response with an output
    where the gold has none is wrong."""
    if gold.get("output") is None and response.get("output") is not None:
        return False
    return response.get("input") == gold.get("input") and response.get("exception") == gold.get("exception")


@api("RegisterUser", check=_register_check)
def register_user(db: Session, username: str, password: str, email: str) -> dict:
    accounts = db.table("Account")
    if username in accounts:
        raise ApiError("The username already exists.")
    # replayed: the token the dialogue was given, which its later calls use
    recorded = db.recorded.get("token") if isinstance(db.recorded, dict) else None
    token = recorded or _random_token(f"{username}|{password}|{email}")
    accounts[username] = {"password": password, "token": token, "email": email}
    return {"token": token}


@api("DeleteAccount")
def delete_account(db: Session, token: str) -> dict:
    username = check_token(db, token)
    accounts = db.table("Account")
    if username not in accounts:
        raise ApiError("No such user.")
    del accounts[username]
    return {"status": "success"}


# upstream issues this fixed code (its random draw is commented out)
VERIFICATION_CODE = 970420


@api("ForgotPassword")
def forgot_password(db: Session, status: str, **kwargs: Any) -> Any:
    """Two steps: 'Forgot Password' issues the code, 'Verification Code' then sets the new password. The
    issued code is kept in the session (upstream keeps it in the API object, and its evaluator makes a fresh
    one for every evaluated call, so there the second step never finds a code: a replayed first step does)."""
    if status == "Forgot Password":
        return _issue_code(db, kwargs)
    if status == "Verification Code":
        return _verify_code(db, kwargs)
    raise ApiError("The status is only 'Forgot Password' or 'Verification Code'.")


def _issue_code(db: Session, kwargs: dict[str, Any]) -> int:
    if "username" not in kwargs or "email" not in kwargs:
        raise ApiError("The username and email are required for the first call.")
    accounts = db.table("Account")
    if kwargs["username"] not in accounts:
        raise ApiError("The username does not exist.")
    if accounts[kwargs["username"]]["email"] != kwargs["email"]:
        raise ApiError("The email is incorrect.")
    db.state["forgot_password"] = {"username": kwargs["username"], "code": VERIFICATION_CODE}
    return VERIFICATION_CODE


def _verify_code(db: Session, kwargs: dict[str, Any]) -> str:
    issued = db.state.get("forgot_password")
    if issued is None:
        raise ApiError("You need to call the API with status 'Forgot Password' at first.")
    if "verification_code" not in kwargs or "new_password" not in kwargs:
        raise ApiError("The new password and verification code are required for the second call.")
    if kwargs["verification_code"] != issued["code"]:
        raise ApiError("The verification code is incorrect.")
    db.table("Account")[issued["username"]]["password"] = kwargs["new_password"]
    return "success"


@api("ModifyPassword")
def modify_password(db: Session, token: str, old_password: str, new_password: str) -> dict:
    username = check_token(db, token)
    account = db.table("Account")[username]
    if account["password"] != old_password:
        raise ApiError("The old password is incorrect.")
    account["password"] = new_password
    return {"status": "success"}


# --- bank and stock ---------------------------------------------------------------------------

# Upstream's OpenBankAccount has no init_database file: it keeps its own table, which starts with
# this one account.
_INITIAL_BANK_ACCOUNTS = ("test",)


@api("OpenBankAccount")
def open_bank_account(db: Session, account: str, password: str, name: str) -> str:
    # an existing account is an output "failed", not an exception, upstream
    return "failed" if account in _INITIAL_BANK_ACCOUNTS else "success"


def _balance_check(response: Result, gold: Result) -> bool:
    """Upstream compares the stripped token, the output and the exception."""
    return (str(response["input"].get("token", "")).strip() == str(gold["input"].get("token", "")).strip()
            and response.get("output") == gold.get("output")
            and response.get("exception") == gold.get("exception"))


@api("QueryBalance", check=_balance_check)
def query_balance(db: Session, token: str) -> float:
    try:
        username = check_token(db, token)
    except ApiError:
        raise ApiError("The token is incorrect.") from None  # upstream rewords the checker's failure
    bank = db.table("Bank")
    if username not in bank:
        raise ApiError("The user does not have an account.")
    return bank[username]["balance"]


def _stock_key(stock_code: Any, date: Any) -> tuple:
    code = str(stock_code).upper().strip() or None
    return code, comparable_time(date, "%Y-%m-%d")


def _stock_check(response: Result, gold: Result) -> bool:
    """Upstream compares the normalised stock code (upper case, stripped) and date, the output and
    the exception."""
    r, g = response["input"], gold["input"]
    return (_stock_key(r.get("stock_code", ""), r.get("date", "")) == _stock_key(g.get("stock_code", ""), g.get("date", ""))
            and response.get("output") == gold.get("output")
            and response.get("exception") == gold.get("exception"))


@api("QueryStock", check=_stock_check)
def query_stock(db: Session, stock_code: str, date: str) -> float:
    code = stock_code.upper().strip()
    if not code:
        raise ApiError("The stock code cannot be empty.")
    try:
        day = upstream_time(date, "%Y-%m-%d")
    except ValueError as e:
        raise ApiError(str(e)) from None
    prices = db.table("Stock")
    if code not in prices:
        raise ApiError("The stock code does not exist.")
    if day not in prices[code]:
        raise ApiError("The stock price of this date is not maintained.")
    return prices[code][day]
