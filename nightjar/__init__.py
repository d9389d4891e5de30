"""Nightjar's assembly: the CLI, the pipeline topology, the demo, benchmarks and progress recording.

The top layer: it imports the stages (``ingest``, ``enrich``, ``alerts``, ``dashboard``, ``generator``) and the
plumbing (``core``); nothing imports it but the ``nightjar`` entry point and the tests.
"""

__version__ = "0.1.0"
