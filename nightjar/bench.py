"""``nightjar bench TARGET``: benchmarks that print figures (never timed tests).

Each target module exposes ``add_arguments(parser)`` and ``run(args, settings) -> int`` like a command.
"""

from __future__ import annotations

import argparse
import importlib

from nightjar.config import Settings

TARGETS: dict[str, tuple[str, str]] = {
    "ingest": ("ingest.bench_ingest", "broker raw consume rate vs pipeline bronze ingest rate"),
    "parse": ("ingest.bench_parse", "parse-stage events/s, batch and streaming"),
    "generate": ("generator.bench", "generator events/s to Kafka and to files"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_target", metavar="TARGET", parser_class=type(parser))
    sub.required = True
    for name, (module_name, help_text) in TARGETS.items():
        target = sub.add_parser(name, help=help_text, description=help_text)
        # Common options are accepted after the target too: `nightjar bench ingest --lake L`.
        target.add_argument("--bootstrap", metavar="HOST:PORT", default=argparse.SUPPRESS)
        target.add_argument("--lake", metavar="DIR", default=argparse.SUPPRESS)
        target.set_defaults(_bench_module=module_name)
        importlib.import_module(module_name).add_arguments(target)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return int(importlib.import_module(args._bench_module).run(args, settings) or 0)
