"""The `families` sub-command: the model families `--model-family` takes, with each one's answer
syntax, box format, frame and input, and (for one family) the source of every rule and what its
own code or card leaves open (docs/model-families.md says the same in prose)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from needlepoint.core.geometry import coordinate_range
from needlepoint.families.catalog import FAMILIES, JSON, Family, family
from needlepoint.families.syntaxes import SYNTAXES

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `families` command."""
    p = sub.add_parser(
        "families",
        help="the model families --model-family takes: their prompt, answer syntax, box format, frame and sources",
        description="The model families --model-family takes, each rule with its source (docs/model-families.md).",
    )
    p.add_argument("name", nargs="?", help="one family: every rule with its source")
    p.add_argument("--json", action="store_true", help="print the families as JSON")


def _answer(fam: Family) -> str:
    if fam.detector:
        return f"in-process detector ({fam.detector})"
    if fam.syntax == JSON:
        return "JSON"
    return SYNTAXES[fam.syntax].example


def _scale(fam: Family) -> str:
    if fam.box_format is None:
        return "--box-format as stated"
    words = f"{fam.box_format} ({coordinate_range(fam.box_format)})"
    return words if fam.frame == "official" else f"{words}, frame {fam.frame}"


def row(fam: Family) -> list[str]:
    """One family as the table shows it."""
    images = "1 (pair merged)" if fam.max_images == 1 else str(fam.max_images or "-")
    return [fam.name, fam.models, _answer(fam), _scale(fam), fam.input_mode, images, fam.served]


def _details(fam: Family) -> str:
    lines = [f"{fam.name}: {fam.models}"]
    lines += [f"  answer:  {_answer(fam)}", f"  boxes:   {_scale(fam)}", f"  input:   {fam.input_mode}"]
    lines.append(f"  prompt:  {fam.prompt if fam.prompt else '(none of its own: the benchmark prompt)'}")
    if fam.system:
        lines.append(f"  system:  {fam.system}")
    lines.append(f"  served:  {fam.served}")
    tokens = SYNTAXES[fam.syntax].tokens if fam.syntax in SYNTAXES else ()
    if tokens:
        kept = fam.request.get("skip_special_tokens") is False
        how = "requests ask the server to keep them" if kept else "a server drops them from replies unless asked; read either way"
        lines.append(f"  special tokens ({how}): {' '.join(tokens)}")
    if fam.max_images or fam.max_side:
        lines.append(f"  limits:  {fam.max_images or '-'} images a request, {fam.max_side or '-'} px a side")
    if fam.sampling:
        lines.append("  decoding: " + ", ".join(f"{k} {v}" for k, v in fam.sampling.items()))
    if fam.request:
        lines.append("  request: " + json.dumps(dict(fam.request)))
    lines.append("  sources:")
    lines += [f"    {rule}: {where}" for rule, where in fam.sources.items()]
    if fam.unverified:
        lines.append("  not pinned down by its own code or card:")
        lines += [f"    {item}" for item in fam.unverified]
    return "\n".join(lines)


def run(ns: argparse.Namespace) -> int:
    """Print the families (or one)."""
    chosen = [family(ns.name)] if ns.name else list(FAMILIES.values())
    if ns.json:
        print(json.dumps([asdict(f) for f in chosen], indent=2, default=str))
    elif ns.name:
        print(_details(chosen[0]))
    else:
        header = ["family", "models", "answer", "boxes", "input", "images", "served by"]
        rows = [header] + [row(f) for f in chosen]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        for r in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
        print("\nneedlepoint families NAME: every rule of one family with its source (docs/model-families.md)")
    return 0
