"""Which rule files a command loads: the built-in pack, plus the operator's own (``--rules``, ``NIGHTJAR_RULES``).

ARCHITECTURE.md's contract: ``--rules PATH`` (repeatable) on ``run``, ``backtest``, ``rules`` and ``dashboard`` *adds*
rule files or folders — e.g. a SigmaHQ checkout — to the built-in pack. A rule outside the pack with a built-in rule's
id replaces that rule (:func:`alerts.rule_loader.load_rules` logs which), so an operator's directory that is a copy of
the pack, edited, runs as the pack. ``--no-builtin-rules`` runs the given rules alone.

Kept apart from :mod:`alerts.rule_loader` (which imports Spark): the CLI and the dashboard build their arguments
from here without loading Spark.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from core.errors import UserError

BUILTIN_RULES = Path(__file__).resolve().parent / "rule_pack"


def rule_sources(paths: Iterable[Path] = (), builtin: bool = True) -> list[Path]:
    """The rule files/directories to load: the built-in pack (unless ``builtin`` is false), then ``paths``.

    A path that is the pack itself is not read twice. Rules in ``paths`` override built-in rules of the same id
    (:func:`load_rules`)."""
    extra = [Path(p) for p in paths if not _same_path(Path(p), BUILTIN_RULES)]
    return ([BUILTIN_RULES] if builtin or any(_same_path(Path(p), BUILTIN_RULES) for p in paths) else []) + extra


def add_rules_arguments(parser: argparse.ArgumentParser, what: str = "rule file or directory") -> None:
    """``--rules PATH`` (repeatable, beside the built-in pack) and ``--no-builtin-rules``, for every command."""
    parser.add_argument("--rules", action="append", type=Path, metavar="PATH",
                        help=f"{what} (repeatable), e.g. a SigmaHQ checkout: run beside the built-in rule pack; a "
                             "rule with a built-in rule's id replaces it (env NIGHTJAR_RULES)")
    parser.add_argument("--no-builtin-rules", dest="builtin_rules", action="store_false", default=None,
                        help="run only the --rules given, not the built-in pack (env NIGHTJAR_BUILTIN_RULES=0)")


def rules_from_args(args: argparse.Namespace, settings) -> list[Path]:
    """The rule sources a command loads: its ``--rules`` (else the configured ``NIGHTJAR_RULES``) beside the
    built-in pack unless ``--no-builtin-rules``. A path that does not exist, or no rules at all, is a UserError."""
    paths = list(getattr(args, "rules", None) or settings.rules)
    builtin = settings.builtin_rules if getattr(args, "builtin_rules", None) is None else args.builtin_rules
    for p in paths:
        if not Path(p).exists():
            raise UserError(f"rules path {p} does not exist", exit_code=2)
    sources = rule_sources(paths, builtin)
    if not sources:
        raise UserError("no rules to run: --no-builtin-rules needs --rules PATH", exit_code=2)
    return sources


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def is_builtin(f: Path) -> bool:
    """Whether the rule file ``f`` belongs to the built-in pack."""
    return BUILTIN_RULES == f.resolve() or BUILTIN_RULES in f.resolve().parents
