"""`--api-url URL#weight`: the optional weight of an endpoint, for weighted least-in-flight.

A server with twice the GPUs takes `#2`: the client sends each request to the endpoint with the
fewest requests in flight per unit of weight. No weight means 1.
"""

from __future__ import annotations

import math
from typing import Any

from needlepoint.errors import DataError


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
        raise DataError(f"--api-url weight #{tail} is not a positive number; write the weight after #, e.g. http://node2:8000/v1#2")
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
