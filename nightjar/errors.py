"""Errors that mean "the user asked for something that cannot be done": the CLI prints one line."""

from __future__ import annotations


class UserError(Exception):
    """An expected failure with a message that names the problem and the fix."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DataLossError(UserError):
    """Kafka offsets recorded in a checkpoint no longer exist on the broker."""
