"""Tokens, time and cost of a run, from the usage the servers returned (each turn's `usage`), and
the budget that stops a run before it spends more than `--max-cost` or `--max-tokens-total`.

`summarize` sums the records' turns per role ("model", "localizer", ...; a tool's calls under the
tool's role, "embeddings" for the embedder): requests, prompt, completion and reasoning tokens
(reasoning tokens are part of the completion tokens, as OpenAI counts them), the seconds the
requests took, and the cost where a price is known. metrics.json keeps it as its `usage` block.

`Budget` is the gate the request path consults (SolveContext.complete): `refusal()` before a
request is sent says why it must not be (the next requests would pass a budget), `charge()` after
an answer counts what it used. It starts from what the run's stored records already used, so a
resumed run honours the same budget.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.numeric import MAX_TURN_TOKENS, clean_usage, unknown_usage, usable_tokens
from needlepoint.core.records import Record, Turn

__all__ = [
    "MAX_TURN_TOKENS",
    "Budget",
    "Price",
    "Prices",
    "clean_usage",
    "load_prices",
    "parse_price",
    "summarize",
    "summary_line",
    "tokens_of",
    "unknown_usage",
    "usable_tokens",
]

TOOL_ROLES = {"embed": "embeddings"}  # a tool turn's name -> the role its calls are summed under
PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True)
class Price:
    """Dollars (or any currency) per million prompt and completion tokens."""

    input: float
    output: float

    def cost(self, prompt: int, completion: int) -> float:
        """The cost of a request's tokens."""
        return (prompt * self.input + completion * self.output) / PER


@dataclass
class Prices:
    """The prices known for a run: one per model name (`--prices FILE`), and a default for any
    other model (`--price IN,OUT`, meant for the --model)."""

    by_model: dict[str, Price] = field(default_factory=dict)
    default: Price | None = None

    def of(self, model: str | None) -> Price | None:
        """The price of a model, or None when unknown."""
        return self.by_model.get(model or "", self.default)

    def __bool__(self) -> bool:
        return bool(self.by_model) or self.default is not None


def _number(text: Any, where: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise DataError(f"{where} must be a price of 0 or more per million tokens, not {text!r}")
    return value


def parse_price(text: str) -> Price:
    """`--price IN,OUT` (per million prompt and completion tokens), or DataError in one sentence."""
    parts = text.split(",")
    if len(parts) != 2:
        raise DataError(f"--price takes IN,OUT (per million prompt and completion tokens, e.g. 0.15,0.60), not {text!r}")
    return Price(_number(parts[0].strip(), "--price's IN"), _number(parts[1].strip(), "--price's OUT"))


def load_prices(path: Path | None, price: str | None = None) -> Prices:
    """The prices of `--prices FILE` (TOML: a table per model, `["Qwen/Qwen2.5-VL-7B-Instruct"]`
    with `input = 0.2` and `output = 0.6` per million tokens) and `--price IN,OUT`."""
    prices = Prices(default=parse_price(price) if price else None)
    if path is None:
        return prices
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"--prices {path} cannot be read ({exc.strerror or exc}); give a TOML file of prices per model") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"--prices {path} is not valid TOML ({exc}); see docs/cost.md for the layout") from None
    for model, entry in data.items():
        if not isinstance(entry, dict) or set(entry) != {"input", "output"}:
            raise DataError(
                f"--prices {path}: the entry of {model!r} must hold exactly `input` and `output` (per million tokens)"
            )
        where = f"--prices {path}: {model!r}"
        prices.by_model[str(model)] = Price(
            _number(entry["input"], f"{where} input"), _number(entry["output"], f"{where} output")
        )
    return prices


def tokens_of(usage: Mapping[str, Any] | None) -> tuple[int, int, int]:
    """(prompt, completion, reasoning) tokens of a server's `usage` (`usable_tokens`); (0, 0, 0)
    when it is unknown."""
    return usable_tokens(usage) or (0, 0, 0)


def _role(turn: Turn) -> str:
    role = str(turn.get("role") or "model")
    if role == "tool":
        name = str(turn.get("tool") or "tool")
        return TOOL_ROLES.get(name, name)
    return role


def _empty() -> dict[str, Any]:
    return {
        "requests": 0,
        "failed_requests": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "reasoning_tokens": 0,
        "request_s": 0.0,
        "unknown_usage": 0,
    }


_SUMMED = ("requests", "failed_requests", "prompt_tokens", "completion_tokens", "reasoning_tokens", "unknown_usage")

ESTIMATE = "dry-run.json"  # a dry run's estimate, in the folder of the run it counted (dryrun.py)


def read_estimate(run_dir: Path) -> dict[str, Any] | None:
    """The estimate a dry run left in `run_dir`, if any (None for a missing or unreadable file:
    the estimate is a note, never a reason to fail a run)."""
    try:
        value = json.loads((run_dir / ESTIMATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def summarize(
    records: Iterable[Record], prices: Prices | None = None, estimate: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The `usage` block of metrics.json: per role (and in `total`) the requests (tool calls for a
    tool's role), those that failed, prompt/completion/reasoning tokens, the seconds the requests
    took (`request_s`, summed: requests overlap), `unknown_usage`: the answered requests whose usage
    is unknown (none sent, or a count that is not a whole number below MAX_TURN_TOKENS: counted as
    no tokens and no cost), the models seen, and `cost` where every model of
    the role has a price (null where one has none). The same records give the same block (the
    run's wall time is run.json's `wall_s`). With a dry run's `estimate` of the first turns
    (dryrun.read_estimate), `dry_run` holds it beside what the main model's first turns used."""
    roles: dict[str, dict[str, Any]] = {}
    models: dict[str, set[str]] = {}
    unpriced: dict[str, bool] = {}
    first = {"requests": 0, "prompt_tokens": 0}  # the main model's first turns, as the dry run counts them
    for record in records:
        turns = record.get("turns") or []
        if turns and _role(turns[0]) == "model" and usable_tokens(turns[0].get("usage")) is not None:
            first["requests"] += 1
            first["prompt_tokens"] += tokens_of(turns[0].get("usage"))[0]
        for turn in turns:
            if turn.get("error") and turn.get("attempts") == 0:
                continue  # never sent (a spent budget refused it)
            role = _role(turn)
            row = roles.setdefault(role, _empty())
            row["requests"] += 1
            if turn.get("error"):
                row["failed_requests"] += 1
            prompt, completion, reasoning = tokens_of(turn.get("usage"))
            if not turn.get("error") and turn.get("role") != "tool" and usable_tokens(turn.get("usage")) is None:
                row["unknown_usage"] += 1  # answered, but what it used is unknown: counted as nothing
            row["prompt_tokens"] += prompt
            row["completion_tokens"] += completion
            row["reasoning_tokens"] += reasoning
            latency = turn.get("latency_s")
            if isinstance(latency, (int, float)) and math.isfinite(latency) and not turn.get("reused"):
                row["request_s"] += float(latency)
            model = turn.get("model")
            if model:
                models.setdefault(role, set()).add(str(model))
            if prices and (prompt or completion):
                price = prices.of(str(model) if model else None) if turn.get("role") != "tool" else None
                if price is None:
                    unpriced[role] = True
                else:
                    row["cost"] = row.get("cost", 0.0) + price.cost(prompt, completion)
    total = _empty()
    for role, row in roles.items():
        row["request_s"] = round(row["request_s"], 3)
        row["total_tokens"] = row["prompt_tokens"] + row["completion_tokens"]
        if role in models:
            row["models"] = sorted(models[role])
        if prices:
            row["cost"] = None if unpriced.get(role) else round(row.get("cost", 0.0), 10)
        for key in (*_SUMMED, "request_s"):
            total[key] += row[key]
    total["request_s"] = round(total["request_s"], 3)
    total["total_tokens"] = total["prompt_tokens"] + total["completion_tokens"]
    if prices:
        costs = [row["cost"] for row in roles.values() if "cost" in row]
        total["cost"] = None if any(c is None for c in costs) else round(sum(costs), 10)
    block: dict[str, Any] = {"roles": dict(sorted(roles.items())), "total": total}
    if estimate:
        block["dry_run"] = {"estimate": dict(estimate), "first_turns": first}
    return block


def summary_line(usage: Mapping[str, Any], wall_s: float | None = None) -> str | None:
    """The end-of-run line of tokens, requests, time and cost, e.g. "usage: model 120 requests,
    85,000 prompt + 9,000 completion tokens (1,200 reasoning), 310 s of requests, cost 0.0231";
    None when no request was made."""
    roles = usage.get("roles") or {}
    if not roles:
        return None
    parts = []
    for role, row in roles.items():
        text = f"{role} {row['requests']} requests"
        if row.get("total_tokens"):
            text += f", {row['prompt_tokens']:,} prompt + {row['completion_tokens']:,} completion tokens"
            if row.get("reasoning_tokens"):
                text += f" ({row['reasoning_tokens']:,} reasoning)"
        text += f", {row['request_s']:.0f} s of requests"
        if row.get("unknown_usage"):
            text += (
                f", usage unknown for {row['unknown_usage']:,} of them (the server sent none, or counts that are not "
                f"whole numbers below {MAX_TURN_TOKENS:,}: tokens, cost and budgets count only the rest)"
            )
        if "cost" in row:
            text += (
                ", cost unknown (no price for " + ", ".join(row.get("models") or ["its model"]) + ")"
                if row["cost"] is None
                else f", cost {row['cost']:.4f}"
            )
        parts.append(text)
    line = "usage: " + "; ".join(parts)
    if wall_s is not None:
        line += f"; wall time {wall_s:.0f} s"
    compared = estimate_line(usage)
    return f"{line}\n{compared}" if compared else line


def estimate_line(usage: Mapping[str, Any]) -> str | None:
    """The dry run's estimate of the first turns beside what they used, e.g. "first turns: 36
    requests, 1,146 prompt tokens; the dry run estimated 36 and 1,100 (-4.0%)"; None without one."""
    block = usage.get("dry_run")
    if not isinstance(block, Mapping):
        return None
    est, got = block.get("estimate") or {}, block.get("first_turns") or {}
    tokens = est.get("prompt_tokens")
    said = f"{tokens:,}" if isinstance(tokens, int) else f"{est.get('text_tokens', 0):,} text tokens (images unknown)"
    line = (
        f"first turns: {got.get('requests', 0)} requests, {got.get('prompt_tokens', 0):,} prompt tokens; "
        f"the dry run estimated {est.get('requests')} and {said}"
    )
    if isinstance(tokens, int) and tokens and got.get("prompt_tokens"):
        line += f" ({(got['prompt_tokens'] - tokens) / tokens:+.1%} off)"
    return line


class Budget:
    """The run's spending limits (`--max-cost`, `--max-tokens-total`), consulted before each
    request. The next request is refused once the used amount plus the mean cost of an answered
    request times the requests in flight and the next one would pass a limit: the run then stops
    taking samples (`stop_reason`), and what was refused is a transient failure, retried by a
    rerun with a larger budget. Until a first answer says what a request uses, nothing is refused:
    the first requests in flight (at most --concurrency) may pass a budget smaller than they are."""

    def __init__(self, max_cost: float | None, max_tokens: int | None, prices: Prices) -> None:
        if max_cost is not None and not prices:
            raise DataError("--max-cost needs prices: pass --price IN,OUT or --prices FILE (per million tokens)")
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        self.prices = prices
        self.cost = 0.0
        self.tokens = 0
        self.answered = 0  # requests counted
        self.in_flight = 0
        self.reason: str | None = None
        self.told = False  # whether an answer without usable usage was said

    @property
    def active(self) -> bool:
        """Whether the run's requests are counted: a limit or a price is set (with a price alone,
        nothing is refused; an answer without usable usage is still said, `charge`)."""
        return self.max_cost is not None or self.max_tokens is not None or bool(self.prices)

    def _unknown(self, model: Any, why: str) -> None:
        """Say once, while the run goes on, that an answer's usage is unknown and what it leaves
        uncounted (the run's end line says how many)."""
        if self.told:
            return
        self.told = True
        counted = [f for f, v in (("--max-cost", self.max_cost), ("--max-tokens-total", self.max_tokens)) if v is not None]
        what = f"the {' and '.join(counted)} budget" if counted else "the cost"
        print(
            f"needlepoint: usage unknown for an answer of {model or 'the model'} ({why}); {what} counts only answers "
            "whose usage is known (said once; the run's end says how many)",
            file=sys.stderr,
            flush=True,
        )

    def add_records(self, records: Iterable[Record]) -> None:
        """Count what stored records already used (a resumed run spends from the same budget): each
        sample's latest record, whose turns answered from the call cache (`reused`) stand for the
        earlier record's that paid for them."""
        for record in records:
            for turn in record.get("turns") or []:
                if turn.get("role") != "tool" and turn.get("usage") and usable_tokens(turn.get("usage")) is not None:
                    self.charge(turn.get("model"), turn.get("usage"))

    def refusal(self) -> str | None:
        """Why the next request must not be sent (one sentence naming the budget), or None; a
        request that may go is counted in flight until `charge` or `release`."""
        if self.reason is None and self.active:
            ahead = self.in_flight + 1
            mean_tokens = self.tokens / self.answered if self.answered else 0.0
            mean_cost = self.cost / self.answered if self.answered else 0.0
            if self.max_tokens is not None and self.tokens + ahead * mean_tokens > self.max_tokens:
                self.reason = (
                    f"the --max-tokens-total budget of {self.max_tokens:,} tokens is spent ({self.tokens:,} used, "
                    f"about {mean_tokens:,.0f} a request); not sent: rerun with a larger budget to continue"
                )
            elif self.max_cost is not None and self.cost + ahead * mean_cost > self.max_cost:
                self.reason = (
                    f"the --max-cost budget of {self.max_cost:g} is spent ({self.cost:.4f} used, about {mean_cost:.4f} "
                    "a request); not sent: rerun with a larger budget to continue"
                )
        if self.reason is None:
            self.in_flight += 1
        return self.reason

    def release(self) -> None:
        """A request admitted by `refusal` ended without usage to count."""
        self.in_flight = max(0, self.in_flight - 1)

    def charge(self, model: Any, usage: Mapping[str, Any] | None) -> None:
        """Count an answered request's usage (`release` ends its time in flight); usage that is
        unknown (`unknown_usage`) counts as nothing, and is said once."""
        why = unknown_usage(usage)
        if why is not None:
            self._unknown(model, why)
            return  # nor a request to average over: a budget is never judged by what is not known
        prompt, completion, _ = tokens_of(usage)
        self.tokens += prompt + completion
        price = self.prices.of(str(model) if model else None)
        if price is not None:
            self.cost += price.cost(prompt, completion)
        self.answered += 1

    def stop_reason(self) -> str | None:
        """The sentence of the budget that stopped the run, or None while it may go on."""
        return self.reason


def add_arguments(parser: Any) -> None:
    """The `eval` flags of prices and budgets (argparse)."""
    group = parser.add_argument_group("tokens and cost (docs/cost.md)")
    group.add_argument("--price", metavar="IN,OUT", help="price per million prompt and completion tokens of --model's requests")
    group.add_argument(
        "--prices", type=Path, metavar="FILE", help='TOML file of prices per model: ["MODEL"] input = ..., output = ...'
    )
    group.add_argument(
        "--max-cost", type=float, help="stop before the next requests would cost more than this in all (needs prices)"
    )
    group.add_argument(
        "--max-tokens-total", type=int, help="stop before the next requests would use more prompt + completion tokens than this"
    )


def config_values(ns: Any) -> dict[str, Any]:
    """RunConfig's keywords from the flags of `add_arguments`."""
    return {"price": ns.price, "prices": ns.prices, "max_cost": ns.max_cost, "max_tokens_total": ns.max_tokens_total}


USAGE_COLUMNS = ["requests", "failed", "prompt tokens", "completion tokens", "reasoning tokens", "request s", "cost"]
_FIELDS = ["requests", "failed_requests", "prompt_tokens", "completion_tokens", "reasoning_tokens", "request_s", "cost"]


def _cells(row: Mapping[str, Any]) -> list[Any]:
    return [row.get(k) for k in _FIELDS]


def usage_table(usage: Any, wall_s: Any = None) -> Any:
    """metrics.json's `usage` block as a Table for the run's report page (None when it has no
    requests): a row per role and the total; `wall_s` (run.json's) in the title."""
    from needlepoint.contract.base import Table

    roles = usage.get("roles") if isinstance(usage, dict) else None
    if not isinstance(roles, dict) or not roles:
        return None
    wall = f", {wall_s:.0f} s of wall time" if isinstance(wall_s, (int, float)) else ""
    table = Table(f"Tokens, time and cost (the servers' usage{wall})", ["role", "models", *USAGE_COLUMNS])
    for role, row in roles.items():
        if isinstance(row, dict):
            table.rows.append([role, ", ".join(map(str, row.get("models") or [])) or None, *_cells(row)])
    total = usage.get("total")
    if isinstance(total, dict) and len(table.rows) > 1:
        table.rows.append(["total", None, *_cells(total)])
    block = usage.get("dry_run")
    if isinstance(block, dict):  # the first turns beside the dry run's estimate of them
        est, got = block.get("estimate") or {}, block.get("first_turns") or {}
        table.rows.append(["model, first turns", None, got.get("requests"), None, got.get("prompt_tokens"), *[None] * 4])
        table.rows.append(["dry-run estimate", None, est.get("requests"), None, est.get("prompt_tokens"), *[None] * 4])
    return table


def usage_board(benchmark: str, runs: Sequence[Any]) -> Any:
    """The leaderboard's board of what each run used (`usage.total` of its metrics.json), in the
    order runs come; None when no run has a usage block."""
    from needlepoint.contract.boards import Board, BoardRow, count

    board = Board(
        f"{benchmark}_usage",
        f"{benchmark}: tokens, time and cost (the servers' usage, summed over every role)",
        ["model"],
        USAGE_COLUMNS,
        counts=frozenset(USAGE_COLUMNS[:5]),
        note="cost as priced by the run's --price/--prices; empty where a model had no price",
    )
    for run in runs:
        total = run.metrics.get("usage", {}).get("total") if isinstance(run.metrics.get("usage"), dict) else None
        if not isinstance(total, dict):
            continue
        values: list[Any] = [count(total.get(k)) for k in _FIELDS[:5]]
        seconds, cost = total.get("request_s"), total.get("cost")
        values.append(f"{seconds:.0f}" if isinstance(seconds, (int, float)) else None)
        values.append(f"{cost:.4f}" if isinstance(cost, (int, float)) else None)
        board.rows.append(BoardRow([run.label], values, str(run.dir)))
    return board if board.rows else None
