"""The ``nightjar`` command: one entry point, one module per subcommand.

Each subcommand lives in the package that owns its concern and exposes two functions::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace, settings: Settings) -> int: ...

This file only wires them together, parses the common options (``--bootstrap``, ``--lake``) and turns
expected failures (:class:`core.errors.UserError`) into one-line messages with a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from core.clean_exit import run_as_program
from core.config import OWNER_ONLY_UMASK, settings_from_env
from core.errors import UserError

# name -> (module, one-line help). Modules are imported lazily so that `nightjar --help` is instant
# and a command never pays for another's imports (Spark, Streamlit, …).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("nightjar.demo", "embedded broker + sample producer + pipeline + dashboard"),
    "broker": ("ingest.embedded_broker", "run the embedded Kafka-compatible broker (Tansu)"),
    "run": ("nightjar.pipeline", "run the streaming pipeline (Kafka -> Delta)"),
    "tables": ("core.lake", "list the lake's tables with row counts"),
    "maintain": ("core.maintenance", "compact, Z-order, checkpoint and vacuum the lake's tables"),
    "dashboard": ("dashboard.launcher", "start the Streamlit dashboard"),
    "produce-samples": ("ingest.sample_producer", "send sample raw log lines to the raw topics"),
    "generate": ("generator.command", "generate synthetic security logs with labelled attacks"),
    "parse": ("ingest.parse_command", "batch-parse log files into normalized ECS JSON"),
    "replay": ("ingest.replay", "send captured log files to the raw topics, optionally shifted to now"),
    "bench": ("nightjar.bench", "benchmarks that print throughput figures"),
    "cluster": ("nightjar.cluster", "a local Spark standalone cluster: `cluster up|down|status`"),
    "alerts": ("alerts.alerts_tail", "the alerts topic: `alerts tail` prints alerts as the SOC receives them"),
    "rules": ("alerts.rules_test", "detection rules: `rules test` runs every rule's sample logs, `rules list`, `rules check PATH…` compiles"),
    "rebuild-events": ("nightjar.rebuild_events", "rebuild events, quarantine and dhcp_sessions from bronze with the "
                       "current parse (a lake of the old events contract)"),
    "backtest": ("alerts.backtest", "run the detection rules in batch over the events history"),
    "score": ("alerts.scoring", "precision, recall and latency of the alerts against the generator's ground truth"),
    "ml": ("alerts.ml.ml_command", "behavioural/lexical ML models: `ml train`, `ml evaluate`, `ml list`"),
}


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; scripts and people want one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="Kafka bootstrap servers (env NIGHTJAR_BOOTSTRAP; default: the embedded broker on 127.0.0.1:9092)",
    )
    common.add_argument("--lake", metavar="DIR", help="lake directory (env NIGHTJAR_LAKE; default ./lake)")
    common.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return common


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported (``nightjar --help`` stays instant
    and one command never pays for another's imports: Spark, Streamlit, …)."""
    common = _common_options()
    parser = OneLineParser(prog="nightjar", description="Nightjar streaming security analytics")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        cmd.set_defaults(_module=module_name)
        if name == chosen:
            importlib.import_module(module_name).add_arguments(cmd)
    return parser


def configure_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "urllib3", "streamlit", "tornado", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand and return its exit status.

    Run as the ``nightjar`` program (no ``argv``), the process ends through :func:`core.clean_exit.run_as_program`:
    reading several Delta tables otherwise aborts the interpreter at exit (status 134; see core/clean_exit.py).
    """
    if argv is None:
        os.umask(OWNER_ONLY_UMASK)  # the lake, checkpoints and logs this program (and its JVM) creates: owner-only
        run_as_program(lambda: _main(sys.argv[1:]))
    return _main(argv)


def _main(argv: Sequence[str]) -> int:
    argv = list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    module = importlib.import_module(args._module)
    try:
        settings = settings_from_env(bootstrap=args.bootstrap, lake=args.lake)  # a bad NIGHTJAR_* value: one line
        return int(module.run(args, settings) or 0)
    except UserError as exc:
        print(f"nightjar {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"nightjar {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
