"""MM-NIAH answer judge: the authors' `is_correct` (calculate_scores.py), rule for rule.

The official scores come from that function, so every quirk is kept (see the module constants and
`judge`). Where the authors' code would stop with an exception we score 0 and say why in
`Verdict.crash`, so the aggregate can count those rows instead of failing.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from needlepoint.contract.base import DataError

# Reasons the authors' script would raise on a (response, answer) pair.
NO_RESPONSE = "no_response"  # response is None: `None.strip` fails
RESPONSE_NOT_TEXT = "response_not_text"  # a number or list where text was expected
UNICODE_DIGITS = "unicode_digits"  # str.isdigit() but int() refuses, e.g. superscript digits
EMPTY_ANSWER = "empty_answer"  # a list answer of length 0: division by zero
ANSWER_TYPE = "answer_type"  # neither int, list nor str: the VQA path calls str methods on it


@dataclass(frozen=True)
class Verdict:
    """A score in [0, 1] and, when the authors' code would have crashed on this pair, why."""

    score: float
    crash: str | None = None


# --- The classic VQA answer normalisation (as vendored in MM-NIAH's utils/tools.py) ---------------

_PUNCTUATION = ';/[]"{}()=+\\_-><@`,?!'
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
# The authors' pattern "(?!<=\d)(\.)(?!\d)" has a typo'd look-behind that never fires: in effect a
# period not followed by a digit.
_LONE_PERIOD = re.compile(r"\.(?!\d)")
# They call `pattern.sub("", text, re.UNICODE)`: the flag lands in `count`, so at most 32 go.
_PERIOD_LIMIT = int(re.UNICODE)
_ARTICLES = frozenset({"a", "an", "the"})
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
        " fifteen sixteen seventeen eighteen nineteen".split()
    )
} | {word: str(10 * tens) for tens, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
# key>value pairs; the capitalised keys can never match (words are lower-cased first) and
# "somebody'd" really maps to "somebodyd" in the original table.
_CONTRACTIONS = dict(
    pair.split(">")
    for pair in """
aint>ain't arent>aren't cant>can't couldve>could've couldnt>couldn't couldn'tve>couldn't've
couldnt've>couldn't've didnt>didn't doesnt>doesn't dont>don't hadnt>hadn't hadnt've>hadn't've
hadn'tve>hadn't've hasnt>hasn't havent>haven't hed>he'd hed've>he'd've he'dve>he'd've hes>he's
howd>how'd howll>how'll hows>how's Id've>I'd've I'dve>I'd've Im>I'm Ive>I've isnt>isn't itd>it'd
itd've>it'd've it'dve>it'd've itll>it'll let's>let's maam>ma'am mightnt>mightn't
mightnt've>mightn't've mightn'tve>mightn't've mightve>might've mustnt>mustn't mustve>must've
neednt>needn't notve>not've oclock>o'clock oughtnt>oughtn't ow's'at>'ow's'at 'ows'at>'ow's'at
'ow'sat>'ow's'at shant>shan't shed've>she'd've she'dve>she'd've she's>she's shouldve>should've
shouldnt>shouldn't shouldnt've>shouldn't've shouldn'tve>shouldn't've somebody'd>somebodyd
somebodyd've>somebody'd've somebody'dve>somebody'd've somebodyll>somebody'll
somebodys>somebody's someoned>someone'd someoned've>someone'd've someone'dve>someone'd've
someonell>someone'll someones>someone's somethingd>something'd somethingd've>something'd've
something'dve>something'd've somethingll>something'll thats>that's thered>there'd
thered've>there'd've there'dve>there'd've therere>there're theres>there's theyd>they'd
theyd've>they'd've they'dve>they'd've theyll>they'll theyre>they're theyve>they've twas>'twas
wasnt>wasn't wed've>we'd've we'dve>we'd've weve>we've werent>weren't whatll>what'll
whatre>what're whats>what's whatve>what've whens>when's whered>where'd wheres>where's
whereve>where've whod>who'd whod've>who'd've who'dve>who'd've wholl>who'll whos>who's
whove>who've whyll>why'll whyre>why're whys>why's wont>won't wouldve>would've wouldnt>wouldn't
wouldnt've>wouldn't've wouldn'tve>wouldn't've yall>y'all yall'll>y'all'll y'allll>y'all'll
yall'd've>y'all'd've y'alld've>y'all'd've y'all'dve>y'all'd've youd>you'd youd've>you'd've
you'dve>you'd've youll>you'll youre>you're youve>you've
""".split()
)


def _punctuation(text: str) -> str:
    """Drop or space out punctuation; a mark touching a space (or any 'digit,digit') is dropped."""
    glued_number = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in _PUNCTUATION:
        # The tests look at the original text, not at the text being rewritten.
        dropped = glued_number or f"{mark} " in text or f" {mark}" in text
        out = out.replace(mark, "" if dropped else " ")
    return _LONE_PERIOD.sub("", out, count=_PERIOD_LIMIT)


def _words(text: str) -> str:
    """Lower-case, number words to digits, articles out, contractions restored."""
    kept = []
    for word in text.lower().split():
        word = _NUMBER_WORDS.get(word, word)
        if word not in _ARTICLES:
            kept.append(_CONTRACTIONS.get(word, word))
    return " ".join(kept)


def vqa_normalise(text: str) -> str:
    """The VQA normalisation both sides of an open answer go through before matching."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _words(_punctuation(text))


def _open_answer(response: str, answer: str) -> float:
    """Whole-word match of the normalised answer inside the normalised response.

    An answer made only of articles normalises to '' and so matches any response holding a word
    character: kept, as the authors' code does it.
    """
    pattern = r"\b" + re.escape(vqa_normalise(answer)) + r"\b"
    return 1.0 if re.search(pattern, vqa_normalise(response)) else 0.0


# --- The three answer kinds --------------------------------------------------------------------------


def _option(response: str, answer: int) -> Verdict:
    """Multiple choice (0-based index) or a single count given as an int."""
    if response.isdigit():
        if not response.isdecimal():  # superscripts, circled digits...: isdigit() yet not decimal
            return Verdict(0.0, UNICODE_DIGITS)
        # int(response) == answer, digit by digit: int() refuses over 4,300 digits (a reply can
        # carry more), where the authors' Python read any length
        digits = "".join(str(unicodedata.decimal(c)) for c in response).lstrip("0") or "0"
        return Verdict(float(digits == str(int(answer))))
    text = response.lower().replace("the answer is", "").replace("*", "")
    if "." in text:
        text = text.split(".")[0].replace(",", "")
    text = text.strip()
    if text == "none":
        return Verdict(0.0)
    if "the camera is moving left" in text:
        text = "a"
    elif "the camera is moving right" in text:
        text = "b"
    if len(text) != 1:
        return Verdict(0.0)
    return Verdict(float(ord(text) - ord("a") == answer))


def _counts(response: str, answer: list[Any]) -> Verdict:
    """A list answer: share of positions where the parsed response list agrees (partial credit)."""
    text = response.replace("json", "").replace("```", "").strip()
    try:
        parsed = json.loads(text)
    except Exception:  # anything that does not parse scores 0, as upstream
        return Verdict(0.0)
    if isinstance(parsed, dict):
        # Upstream concatenates the values with sum(..., start=[]); a non-list value raises there
        # inside their try block, which scores 0.
        if not all(isinstance(value, list) for value in parsed.values()):
            return Verdict(0.0)
        parsed = [item for value in parsed.values() for item in value]
    if not isinstance(parsed, list):
        return Verdict(0.0)
    if not answer:
        return Verdict(0.0, EMPTY_ANSWER)
    hits = sum(1 for got, want in zip(parsed, answer, strict=False) if got == want)
    return Verdict(hits / len(answer))


def judge(response: str | None, answer: Any) -> Verdict:
    """Score one response the authors' way; flag the pairs their code would crash on.

    Order of the rules: `response.strip('.')`, then by answer type: int -> option letter or
    number, list -> JSON list with partial credit, anything else -> VQA whole-word match.
    """
    if response is None:
        return Verdict(0.0, NO_RESPONSE)
    if not isinstance(response, str):
        return Verdict(0.0, RESPONSE_NOT_TEXT)
    response = response.strip(".")
    if isinstance(answer, int):  # bool included, as upstream
        return _option(response, answer)
    if isinstance(answer, list):
        return _counts(response, answer)
    if isinstance(answer, str):
        return Verdict(_open_answer(response, answer))
    return Verdict(0.0, ANSWER_TYPE)


def score_answer(response: str | None, answer: Any) -> float:
    """The authors' `is_correct` as a float in [0, 1] (0 where their code would crash)."""
    return judge(response, answer).score


def official_answer(task: str, answer: Any) -> Any:
    """The answer as the authors' aggregator hands it to `is_correct`.

    For counting tasks a non-list answer is JSON-decoded (answers may arrive as '[1, 2]').
    None (no public answer) is passed through for the caller to report.
    """
    if answer is None or "counting" not in task or isinstance(answer, list):
        return answer
    if not isinstance(answer, str):
        raise DataError(
            f"A {task} answer is {answer!r}, but counting answers must be a list of counts or a JSON "
            "string of one; fix the answer field."
        )
    try:
        return json.loads(answer)
    except json.JSONDecodeError:
        raise DataError(
            f"The {task} answer {answer!r} is not valid JSON; counting answers must be a list of "
            "counts or a JSON string of one, so fix the answer field."
        ) from None
