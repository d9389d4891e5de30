"""Nightjar's shared plumbing: typed configuration, errors, the Spark session factory, lake access.

Imports none of the stages (``ingest``, ``enrich``, ``alerts``, ``dashboard``, ``generator``) and none of the
assembly (``nightjar``): every layer above may import it.
"""
