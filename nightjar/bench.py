"""``nightjar bench TARGET``: benchmarks that print figures (never timed tests).

Each target module exposes ``add_arguments(parser)`` and ``run(args, settings) -> int`` like a command.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from core.config import Settings
from nightjar.cli import OneLineParser

TARGETS: dict[str, tuple[str, str]] = {
    "ingest": ("nightjar.benchmarks.bench_ingest", "broker raw consume rate vs pipeline bronze ingest rate"),
    "parse": ("nightjar.benchmarks.bench_parse", "parse-stage events/s, batch and streaming"),
    "detail": ("nightjar.benchmarks.bench_detail", "events contract v2's detail column: MAP vs JSON text vs VARIANT, encode/write/read"),
    "generate": ("nightjar.benchmarks.bench_generate", "generator events/s to Kafka and to files"),
    "enrich": ("nightjar.benchmarks.bench_enrich", "a simulated hour through the events query: state per operator, attribution"),
    "pipeline": ("nightjar.benchmarks.bench_pipeline", "the whole pipeline: drained events/s vs raw consume and per-stage costs, live event->alert latency, step-up sustainable rate"),
    "attacks": ("nightjar.benchmarks.bench_attacks", "recorded attacks (OTRF captures + manifest) replayed through the whole pipeline: which are detected, per dataset and tactic, and events/s"),
    "regression": ("nightjar.benchmarks.bench_regression", "SigmaHQ's regression tests (rule + recorded event) replayed through the whole pipeline, from .evtx and from JSON: which rules raise their alert"),
    "soak": ("nightjar.benchmarks.bench_soak", "hours of steady live traffic: memory, state rows, Delta files, checkpoints and open alerts over time, flat or not"),
    "dashboard": ("nightjar.benchmarks.bench_dashboard", "build a lake with the real pipeline, then time each dashboard page's queries"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # The target's own options are parsed in run(), so that only the chosen benchmark is imported.
    parser.add_argument("bench_target", choices=sorted(TARGETS), metavar="TARGET",
                        help="; ".join(f"{k}: {v[1]}" for k, v in TARGETS.items()))
    parser.add_argument("target_args", nargs=argparse.REMAINDER, help="options of the target (see TARGET --help)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    module_name, help_text = TARGETS[args.bench_target]
    module = importlib.import_module(module_name)
    target = OneLineParser(prog=f"nightjar bench {args.bench_target}", description=help_text)
    # Common options are accepted after the target too: `nightjar bench ingest --lake L`.
    target.add_argument("--bootstrap", metavar="HOST:PORT")
    target.add_argument("--lake", metavar="DIR")
    module.add_arguments(target)
    target_args = target.parse_args(args.target_args)
    settings = settings.with_(
        **{k: (Path(v) if k == "lake" else v) for k in ("bootstrap", "lake") if (v := getattr(target_args, k))}
    )
    return int(module.run(target_args, settings) or 0)
