"""Knowledge and utility APIs: DocumentQA, Dictionary, Translate, SearchEngine, Wiki,
Calculator, QueryHistoryToday, GetToday, SendEmail.

Upstream runs two of these on an online service (Dictionary: api.dictionaryapi.dev; Translate: Google
Translate). What can be done offline is done here from `init_database` (Wiki.json, SearchEngine.json,
QuestionAnswering.json, History.json); the rest is said where it happens. Each check follows that API's upstream `check_api_call_correctness`.
"""
from __future__ import annotations

import ast
import datetime
import re
from typing import Any

from genenv_pl.envs.api_bank_sim.core import ApiError, Result, Session, api
from genenv_pl.envs.api_bank_sim.tool_search import _bm25_scores

# The parameter types of upstream's API classes (`input_parameters`), which upstream's ToolManager
# converts arguments with; all_apis.csv describes other variants of these APIs (see `account.PARAMETERS`).
PARAMETERS: dict[str, dict[str, str]] = {
    "DocumentQA": {"url": "str", "question": "str"},
    "Dictionary": {"keyword": "str"},
    "Translate": {"src": "str", "src_lang": "str", "tgt_lang": "str"},
    "SearchEngine": {"keyword": "str"},
    "Wiki": {"keyword": "str"},
    "Calculator": {"formula": "str"},
    "QueryHistoryToday": {"date": "str"},
    "GetToday": {},
    "SendEmail": {"receiver": "str", "subject": "str", "content": "str"},
}


# --- documents, dictionary, translation, search, wiki --------------------------------------------

@api("DocumentQA",
     # upstream DocumentQA.check_api_call_correctness: url and question (stripped), output, exception
     check=lambda response, gold: (response["input"]["url"].strip() == gold["input"]["url"].strip()
                                   and response["input"]["question"].strip() == gold["input"]["question"].strip()
                                   and response["output"] == gold["output"]
                                   and response["exception"] == gold["exception"]))
def document_qa(db: Session, url: str, question: str) -> str:
    """The answer to a question about a document, from QuestionAnswering.json (upstream's database)."""
    url, question = url.strip(), question.strip()
    if not question:
        raise ApiError("The question is empty.")
    documents = db.table("QuestionAnswering")
    if url not in documents:
        raise ApiError("The document of this url failed to be processed.")
    answers = documents[url]
    # Upstream looks the question up as a key of the document's entry (a {question: answer} mapping).
    # QuestionAnswering.json stores each document as a list of {"question", "answer"} records, which
    # no question string is a member of, so upstream answers every question about a known document
    # with the fallback below; the recorded results show exactly that (article-4's own questions get
    # it), and upstream's check compares the output, so the stored answers are not returned.
    if isinstance(answers, dict) and question in answers:
        return answers[question]
    return "The question is too difficult to answer."


def _dictionary_check(response: Result, gold: Result) -> bool:
    # upstream Dictionary.check_api_call_correctness: api name, output and exception (not the keyword)
    return (response["api_name"] == "Dictionary" and response["output"] == gold["output"]
            and response["exception"] == gold["exception"])


@api("Dictionary", check=_dictionary_check)
def dictionary(db: Session, keyword: str) -> Any:
    """Upstream fetches the keyword's meanings from api.dictionaryapi.dev (an online service; no
    database holds them) and its check compares that output, so offline this returns a labelled
    stand-in, which no recorded output equals."""
    keyword = keyword.replace("_", " ").strip().lower()
    return [{"partOfSpeech": "offline stand-in",
             "definitions": [{"definition": f"(offline stand-in: upstream looks up {keyword!r} at "
                                            "api.dictionaryapi.dev)", "synonyms": [], "antonyms": []}],
             "synonyms": [], "antonyms": []}]


def _translate_check(response: Result, gold: Result) -> bool:
    # upstream Translate.check_api_call_correctness: api name, the source text, output and exception
    return (response["api_name"] == gold["api_name"] and response["input"]["src"] == gold["input"]["src"]
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


@api("Translate", check=_translate_check)
def translate(db: Session, src: str, src_lang: str | None = None, tgt_lang: str | None = None) -> str:
    """Upstream translates with Google Translate (online; English when no target is given) and its
    check compares the translation, so offline this returns a labelled stand-in, which no recorded
    output equals. Upstream's `input` is the arguments as given (no defaults)."""
    target = (tgt_lang or "en").lower()
    return f"[offline stand-in: upstream translates {src!r} to {target!r} with Google Translate]"


_CLITIC = re.compile(r"(?i)^(\w+)(n't|'s|'re|'ve|'ll|'d|'m)$")


def _word_tokens(text: str) -> list[str]:
    """Words and punctuation as NLTK's word_tokenize (the Treebank rules) splits plain text: hyphenated
    words kept whole, punctuation apart, clitics ('s, n't) split off; what SearchEngine.json's
    tokenized_documents were made with."""
    out: list[str] = []
    for token in re.findall(r"\w+(?:-\w+)*(?:n't|'\w+)?|[^\w\s]", text):
        m = _CLITIC.match(token)
        out.extend([m.group(1), m.group(2)] if m else [token])
    return out


def _search_check(response: Result, gold: Result) -> bool:
    # upstream SearchEngine.check_api_call_correctness: api name, exception, and the outputs compared
    # as sets (each sorted by title + abstract)
    if response["api_name"] != gold["api_name"] or response["exception"] != gold["exception"]:
        return False

    def ordered(output: Any) -> Any:
        return None if output is None else sorted(output, key=lambda x: x["title"] + x["abstract"], reverse=True)
    return ordered(response["output"]) == ordered(gold["output"])


@api("SearchEngine", check=_search_check)
def search_engine(db: Session, keyword: str) -> list:
    """The two documents of SearchEngine.json that rank highest for the keyword by BM25 over its
    tokenized documents (ties in their database order; upstream's numpy argsort leaves ties unordered)."""
    table = db.table("SearchEngine")
    scores = _bm25_scores(table["tokenized_documents"], _word_tokens(keyword.lower().strip()))
    ranking = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [table["raw_documents"][i] for i in ranking[:2]]


@api("Wiki",
     # upstream Wiki.check_api_call_correctness: api name, output and exception (not the keyword)
     check=lambda response, gold: (response["api_name"] == gold["api_name"] and response["output"] == gold["output"]
                                   and response["exception"] == gold["exception"]))
def wiki(db: Session, keyword: str) -> dict:
    """The Wiki.json article for the keyword (underscores as spaces, case ignored): its url and summary."""
    articles = db.table("Wiki")
    key = keyword.replace("_", " ").strip().lower()
    if key not in articles:
        raise ApiError("Keyword not found.")
    return {"url": articles[key]["url"], "summary": articles[key]["summary"]}


# --- calculator, dates, email --------------------------------------------------------------------

_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


def _arithmetic(node: ast.AST) -> float:
    """Evaluate a parsed formula holding only integer literals, + - * /, unary signs and parentheses
    (parentheses only group, so they leave no node). Numbers are floats, as upstream computes."""
    if isinstance(node, ast.Expression):
        return _arithmetic(node.body)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return float(node.value)
    raise ApiError("invalid formula")


def _calculator_check(response: Result, gold: Result) -> bool:
    # upstream Calculator.check_api_call_correctness: the formula without spaces, output, exception
    return (response["input"]["formula"].replace(" ", "") == gold["input"]["formula"].replace(" ", "")
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


@api("Calculator", check=_calculator_check)
def calculator(db: Session, formula: str) -> float:
    """The value of an integer formula with + - * / and parentheses, as a float."""
    formula = formula.replace(" ", "")
    operators = sum(formula.count(op) for op in "+-*/")
    # upstream's validity rules: only digits, operators and parentheses; balanced parenthesis counts;
    # at least one operator (a bare number is not a formula); not operators alone
    if (not formula or any(c not in "0123456789+-*/()" for c in formula)
            or formula.count("(") != formula.count(")") or operators == 0 or operators + 1 == len(formula)):
        raise ApiError("invalid formula")
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError:
        raise ApiError("invalid formula") from None
    try:
        return _arithmetic(tree)
    except ZeroDivisionError as e:
        raise ApiError(str(e)) from None  # 'float division by zero', as upstream reports it


def _month_day(date: str) -> str:
    """The date as upstream's QueryHistoryToday reads it: '%Y-%m-%d' (a short year zero-padded) or
    '%m-%d', normalised to '%m-%d'. Raises ValueError (strptime's message for '%m-%d')."""
    date = date.strip()
    parts = date.split("-")
    if len(parts) == 3:
        parts[0] = parts[0].zfill(4)
        date = "-".join(parts)
    try:
        return datetime.datetime.strptime(date, "%Y-%m-%d").strftime("%m-%d")
    except ValueError:
        return datetime.datetime.strptime(date, "%m-%d").strftime("%m-%d")


def _history_check(response: Result, gold: Result) -> bool:
    # upstream QueryHistoryToday.check_api_call_correctness: the normalised dates, output, exception;
    # a date that does not parse compares unequal (upstream compares two distinct exception objects)
    try:
        same_date = _month_day(response["input"]["date"]) == _month_day(gold["input"]["date"])
    except (ValueError, AttributeError):
        return False
    return same_date and response["output"] == gold["output"] and response["exception"] == gold["exception"]


@api("QueryHistoryToday", check=_history_check)
def query_history_today(db: Session, date: str) -> list:
    """The events of History.json on that day of the year, one line each."""
    try:
        day = _month_day(date)
    except ValueError as e:
        raise ApiError(str(e)) from None
    history = db.table("History")
    if day not in history:
        raise ApiError("The date is not in the database.")
    return [f"Title: {e['Title'].strip()}, Date: {e['Date'].strip()}, Description: {e['Description'].strip()}"
            for e in history[day]]


@api("GetToday",
     # upstream GetToday.check_api_call_correctness: an output, no exception and no input (upstream's
     # result has input None; this simulator records a call without arguments as {}); the date itself
     # is not compared
     check=lambda response, gold: (response["output"] is not None and response["exception"] is None
                                   and not response["input"]))
def get_today(db: Session) -> str:
    """Today's date: upstream pins it to 2023-03-31 (the wall clock is commented out there)."""
    return "2023-03-31"


_EMAIL = re.compile(r"[a-z0-9]+[._]?[a-z0-9]+@\w+\.\w{2,3}")


def _email_check(response: Result, gold: Result) -> bool:
    # upstream SendEmail.check_api_call_correctness: receiver (stripped, case ignored), subject and
    # content (stripped), output, exception
    r, g = response["input"], gold["input"]
    return (r["receiver"].strip().lower() == g["receiver"].strip().lower()
            and r["subject"].strip() == g["subject"].strip() and r["content"].strip() == g["content"].strip()
            and response["output"] == gold["output"] and response["exception"] == gold["exception"])


@api("SendEmail", check=_email_check)
def send_email(db: Session, receiver: str, subject: str, content: str) -> str:
    """Sends an email (nothing is stored): the receiver must look like name@domain.tld in lower case."""
    if not _EMAIL.fullmatch(receiver.strip()):
        raise ApiError("Email address of the receiver is invalid.")
    if not subject.strip():
        raise ApiError("Subject cannot be empty.")
    if not content.strip():
        raise ApiError("Content cannot be empty.")
    return "success"
