"""One convention per sub-command: each lives in its package's cli.py with `add_parser(sub)` and
`run(ns)`; needlepoint/cli.py holds the program's parser, `--version`, the signals and `main`, and
defines no sub-command itself."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import pytest
from helpers import REPO

from needlepoint import cli

CLI = REPO / "src" / "needlepoint" / "cli.py"
ORDER = ["eval", "score", "report", "merge", "demo", "compare", "build", "runs", "human", "families"]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


@pytest.mark.parametrize("module", list(dict.fromkeys(cli.COMMANDS.values())), ids=lambda m: m.__name__)
def test_every_sub_command_module_owns_add_parser_and_run(module: cli.SubCommand) -> None:
    """Each module is a package's cli.py whose `add_parser(sub)` adds exactly the sub-commands
    COMMANDS gives it, and whose `run(ns)` runs them."""
    path = Path(inspect.getfile(module))  # type: ignore[arg-type]  # a module, as the protocol's value
    assert path.name == "cli.py" and path.parent != CLI.parent, path
    assert list(inspect.signature(module.add_parser).parameters) == ["sub"]
    assert list(inspect.signature(module.run).parameters) == ["ns"]
    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    module.add_parser(sub)
    assert sorted(sub.choices) == sorted(name for name, owner in cli.COMMANDS.items() if owner is module)


def test_the_top_level_defines_no_sub_command() -> None:
    """cli.py adds one argument (--version) and one set of sub-parsers; every sub-parser comes from
    a module's `add_parser`, and no handler of a sub-command is defined there."""
    tree = ast.parse(CLI.read_text(encoding="utf-8"))
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert calls.count("add_argument") == 1 and calls.count("add_subparsers") == 1
    assert "set_defaults" not in calls and "add_argument_group" not in calls
    literal_parsers = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "add_parser"
        and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args)
    ]
    assert literal_parsers == []
    functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert not {f for f in functions if f.startswith(("cmd_", "run_"))} and not functions & set(ORDER)


def test_the_sub_commands_keep_their_order() -> None:
    """`needlepoint --help` lists the sub-commands as before the move, though one module adds
    several at once (eval, score and merge come from run/cli.py, report between them)."""
    parser = cli.build_parser()
    sub = _subparsers(parser)
    assert list(cli.COMMANDS) == ORDER == list(sub.choices) == [a.dest for a in sub._choices_actions]
    assert "{" + ",".join(ORDER) + "}" in parser.format_usage()
    listed = [line.split()[0] for line in parser.format_help().splitlines() if line.startswith("    ") and line.split()]
    assert [name for name in listed if name in ORDER] == ORDER


def test_main_runs_the_owning_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main` hands the parsed namespace to the `run` of the module COMMANDS names."""
    seen: list[str] = []

    def fake_run(ns: argparse.Namespace) -> int:
        seen.append(ns.command)
        return 7

    monkeypatch.setattr(cli.COMMANDS["runs"], "run", fake_run)
    assert cli.main(["runs", str(REPO / "no-such-folder")]) == 7 and seen == ["runs"]
