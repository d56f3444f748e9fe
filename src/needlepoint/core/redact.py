"""Keeping credentials out of every text needlepoint stores or prints: the one place that knows how.

A credential can travel in the API key, in an endpoint URL's user info (`http://user:key@host`) or
query string (`?api-key=...`), and come back in whatever a server or a library says: an error body
that echoes the request's headers, an exception that names the URL. `scrub` removes all of them.

A setting holds a credential when its name is one of CREDENTIAL_NAMES, exactly (case, `-` and `_`
aside), or one of its names of several words with a qualifier in front (`localizer_api_key`):
`is_credential_name`, the one rule of every writer (run.json's solver settings, the run report's
configuration). A pattern such as "contains token" would hide `--rag-max-tokens`.

The same names mark credentials on a command line (`--api-key X`, `--api-key=X`, `--hf-token X`:
`scrub_args`) and in what a program prints about its settings (`--api-key X`, `API_KEY=X`,
`'api_key': 'X'`: `scrub`), e.g. an inference server's log echoing its arguments.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

REDACTED = "[redacted]"
# Setting names whose value is a credential, compared exactly after `credential_key` (lower case,
# `-` as `_`). Add a name here, never a pattern: `max_tokens`, `sort_key` and `token_budget` are
# settings, not credentials.
CREDENTIAL_NAMES = frozenset(
    {
        "api_key",
        "apikey",
        "key",
        "x_api_key",
        "openai_api_key",
        "api_token",
        "x_api_token",
        "token",
        "access_token",
        "auth_token",
        "bearer_token",
        "hf_token",
        "secret",
        "client_secret",
        "secret_key",
        "private_key",
        "password",
        "passwd",
        "authorization",
        "proxy_authorization",
        "credential",
        "credentials",
        "cookie",
        "bearer",
    }
)
# A URL starts where no scheme character stands before it: one try per word, so that a long line
# without a URL (a server's progress bar) is scanned in linear time, not once per letter.
_URL = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]+")
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[A-Za-z0-9._~+/=-]{4,}")
# `--name VALUE`, `--name=VALUE`, `NAME=VALUE` and `'name': 'VALUE'` (a dict or JSON echo of the
# settings) in free text; the value is replaced when `name` is a credential's (is_credential_name).
_FLAG = re.compile(r"(?<![\w-])(--?)([A-Za-z][\w-]*)(=|[ \t]+)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;)}\]]+)")
_ASSIGN = re.compile(r"(?<![\w-])([A-Za-z][\w]*)(=)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;)}\]]+)")
_KEYED = re.compile(r"([\"'])([A-Za-z][\w-]*)\1(\s*:\s*)(\"[^\"\n]*\"|'[^'\n]*')")


def credential_key(name: str) -> str:
    """A setting's name as CREDENTIAL_NAMES spells names: lower case, `-` written `_`."""
    return name.strip().lower().replace("-", "_")


# Names that stay credentials behind a qualifier (`localizer_api_key`, `embed_password`): the names
# of two or more words, and the passwords. A single word such as "key" or "token" counts only alone.
_QUALIFIABLE = tuple(f"_{n}" for n in sorted(CREDENTIAL_NAMES) if "_" in n or n in ("password", "passwd"))


def is_credential_name(name: str) -> bool:
    """Whether a setting of this name holds a credential: a name of CREDENTIAL_NAMES exactly, or a
    qualified one of its names of several words (`localizer_api_key`); never `rag_max_tokens`."""
    key = credential_key(name)
    return key in CREDENTIAL_NAMES or key.endswith(_QUALIFIABLE)


def redact_url(url: str) -> str:
    """A URL without user info or query string, either of which may carry a credential."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "[unparseable URL]"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    weight = f"#{parts.fragment}" if re.fullmatch(r"[0-9.]+", parts.fragment) else ""  # URL#weight (endpoints.py)
    return urlunsplit((parts.scheme, netloc, parts.path, REDACTED if parts.query else "", "")) + weight


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that may be credentials: the user info (and its password) and each query
    value, to be scrubbed wherever they turn up alone (e.g. an error body quoting a parameter);
    the user info also as sent, percent-decoded, and as its Basic authorization (base64 of
    `user:password`, which a server echoing the request's headers quotes)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    out = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        out += [userinfo, userinfo.split(":", 1)[-1]]  # the whole, and the password alone
        user, _, password = (unquote(p) for p in userinfo.partition(":"))
        basic = base64.b64encode(f"{user}:{password}".encode("latin-1", "replace")).decode("ascii")
        out += [f"{user}:{password}", password, basic]
    out += [v for _, v in parse_qsl(parts.query, keep_blank_values=False)]
    return list(dict.fromkeys(s for s in out if s))


def _scrub_url(match: re.Match[str]) -> str:
    url = match.group(0)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "[unparseable URL]"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(f"{k}={REDACTED}" for k, _ in parse_qsl(parts.query, keep_blank_values=True)) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _quoted(value: str) -> str:
    """REDACTED in the quotes `value` had, if any."""
    return f"{value[0]}{REDACTED}{value[0]}" if value[:1] in ("'", '"') and len(value) >= 2 else REDACTED


def _scrub_flag(match: re.Match[str]) -> str:
    dashes, name, sep, value = match.groups()
    if not is_credential_name(name) or value.startswith(("-", REDACTED[:-1])):
        return match.group(0)
    return f"{dashes}{name}{sep}{_quoted(value)}"


def _scrub_assign(match: re.Match[str]) -> str:
    name, sep, value = match.groups()
    return f"{name}{sep}{_quoted(value)}" if is_credential_name(name) and not value.startswith(REDACTED[:-1]) else match.group(0)


def _scrub_keyed(match: re.Match[str]) -> str:
    quote, name, sep, value = match.groups()
    return f"{quote}{name}{quote}{sep}{_quoted(value)}" if is_credential_name(name) else match.group(0)


FRAGMENT = 8  # the shortest piece of a secret's start or end that `scrub` removes on its own


def _fragments(text: str, secret: str) -> str:
    """`text` without the pieces of `secret` that a cut left (a message cut at 100 or 500 bytes, by
    needlepoint or by a library, before it was scrubbed): any run of FRAGMENT or more characters
    that begins as the secret begins or ends as it ends."""
    if len(secret) <= FRAGMENT:
        return text
    spans = []
    start, end = secret[:FRAGMENT], secret[-FRAGMENT:]
    at = text.find(start)
    while at >= 0:
        n = FRAGMENT
        while at + n < len(text) and n < len(secret) and text[at + n] == secret[n]:
            n += 1
        spans.append((at, at + n))
        at = text.find(start, at + n)
    at = text.find(end)
    while at >= 0:
        n = FRAGMENT  # characters matched, back from the end of the secret
        while at - (n - FRAGMENT) - 1 >= 0 and n < len(secret) and text[at - (n - FRAGMENT) - 1] == secret[-n - 1]:
            n += 1
        spans.append((at + FRAGMENT - n, at + FRAGMENT))
        at = text.find(end, at + FRAGMENT)
    if not spans:
        return text
    out, last = [], 0
    for lo, hi in sorted(spans):
        if hi <= last:
            continue
        out += [text[last : max(lo, last)], REDACTED if lo >= last else ""]
        last = hi
    return "".join(out) + text[last:]


def hide(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with each of `secrets` (e.g. the API key), and any piece of one's start or end that
    a cut left (`_fragments`), replaced by "[redacted]"; nothing else changed (a model's answer
    that echoes the request's key keeps every other word)."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        if secret[: min(FRAGMENT, len(secret))] in text or secret[-FRAGMENT:] in text:
            text = _fragments(text.replace(secret, REDACTED), secret)
    return text


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with each of `secrets` hidden (`hide`), every URL's user info and query values, any
    `Bearer ...` credential and the value of every credential setting it spells out (`--api-key
    X`, `--hf-token=X`, `OPENAI_API_KEY=X`, `'api_key': 'X'`) replaced by "[redacted]"."""
    text = hide(text, secrets)
    text = _URL.sub(_scrub_url, text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    text = _FLAG.sub(_scrub_flag, text)
    text = _ASSIGN.sub(_scrub_assign, text)
    return _KEYED.sub(_scrub_keyed, text)


def arg_secrets(args: Sequence[str]) -> list[str]:
    """The values of the credential flags of a command line (`--api-key X`, `--api-key=X`), to be
    scrubbed wherever they turn up alone (a server echoing its settings in its own words)."""
    out = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if not name.startswith("-") or not is_credential_name(name.lstrip("-")):
            continue
        if eq:
            out.append(value)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.append(args[i + 1])
    return [s for s in out if s]


def scrub_args(args: Sequence[str], secrets: Iterable[str | None] = ()) -> list[str]:
    """A command line as needlepoint stores or prints it: the value of every credential flag
    (`--api-key X`, `--api-key=X`, `--hf-token X`) replaced by "[redacted]", and each argument
    scrubbed (`scrub`: URLs' credentials, `secrets`)."""
    hidden = set(arg_secrets(args))
    out = []
    after_flag = False
    for arg in args:
        name, eq, value = arg.partition("=")
        credential_flag = name.startswith("-") and is_credential_name(name.lstrip("-"))
        if after_flag and not arg.startswith("--"):
            out.append(REDACTED)
        elif credential_flag and eq:
            out.append(f"{name}={REDACTED}")
        else:
            out.append(scrub(arg, [*hidden, *secrets]))
        after_flag = credential_flag and not eq and not after_flag
    return out


def environment_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment's credential variables (`OPENAI_API_KEY`, `HF_TOKEN`, ...,
    by `is_credential_name`): what a server started here may print."""
    env = os.environ if env is None else env
    return [v for k, v in env.items() if v and is_credential_name(k)]
