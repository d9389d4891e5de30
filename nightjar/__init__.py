"""Nightjar shared plumbing: typed configuration, the Spark session factory, lake access, the CLI."""

__version__ = "0.1.0"
