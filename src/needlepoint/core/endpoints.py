"""Endpoint URLs as a user gives them: `--api-url URL#weight` and the paths a base URL must not carry.

The optional weight of an endpoint is for weighted least-in-flight: a server with twice the GPUs
takes `#2`, and the client sends each request to the endpoint with the fewest requests in flight
per unit of weight. No weight means 1.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from needlepoint.core.errors import DataError
from needlepoint.core.redact import redact_url


def split_weight(url: str) -> tuple[str, float]:
    """`"http://host:8000/v1#2"` into `("http://host:8000/v1", 2.0)`; no `#` gives weight 1."""
    base, sep, tail = url.partition("#")
    if not sep:
        return url, 1.0
    try:
        weight = float(tail)
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight) or weight <= 0:
        raise DataError(
            f"--api-url weight #{tail} is not a positive number; write the weight after #, e.g. http://node2:8000/v1#2"
        )
    return base, weight


def add_stats(*lists: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Requests and errors per endpoint (`{url, weight, requests, errors}` rows, as the client's
    `endpoint_stats` gives them) summed by URL: over the sessions of a resumed run, over shards."""
    total: dict[str, dict[str, Any]] = {}
    for rows in lists:
        for row in rows or []:
            t = total.setdefault(row["url"], {"url": row["url"], "weight": row.get("weight", 1.0), "requests": 0, "errors": 0})
            t["weight"] = row.get("weight", t["weight"])
            t["requests"] += int(row.get("requests", 0))
            t["errors"] += int(row.get("errors", 0))
    return list(total.values())


# The paths a client adds itself under a base URL: a base that already ends in one was pasted from
# a request (`.../v1/chat/completions`), and every request would go to `.../chat/completions/...`.
_ROUTES = ("chat/completions", "completions", "embeddings", "models", "tokenize", "responses")


def pasted_route_advice(url: str, flag: str) -> str | None:
    """One sentence when the base URL `url` (given with `flag`) ends in an endpoint's path, naming
    the URL to pass instead (the path dropped, the query string kept), or that it is no URL; None
    when it is a base URL."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an IPv6 host without its closing bracket
        return f"{flag} {redact_url(url)} is not a URL; give a base URL such as http://localhost:8000/v1"
    path = parts.path.rstrip("/")
    for route in _ROUTES:
        if path.endswith("/" + route):
            fixed = redact_url(urlunsplit(parts._replace(path=path[: -len(route) - 1], fragment="")))
            return f"{flag} {redact_url(url)} ends in /{route}, the path needlepoint adds itself; drop it: {flag} {fixed}"
    return None
