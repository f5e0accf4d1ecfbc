"""Errors the CLI turns into exit codes.

UsageError is bad input (exit 2, nothing launched); everything a server does wrong is
recorded as a cell result instead of raised, so one broken configuration never stops a suite.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: a suite field, a git ref, a path, conflicting options."""


class LaunchError(Exception):
    """A server could not be started or never became healthy."""

    def __init__(self, message: str, log_tail: str = "", exit_code: int | None = None):
        super().__init__(message)
        self.log_tail = log_tail
        self.exit_code = exit_code


class ServerError(Exception):
    """A running server answered wrongly: HTTP error, malformed JSON, timeout, death."""


class ServerFinding(Exception):
    """The server answered, but not as SGLang must: null or missing logprobs, a death in the
    middle of a probe. A result about the revision (cell status "finding"), kept with the raw
    samples that show it, never a harness exception."""

    def __init__(self, message: str, samples: tuple[dict, ...] = ()):
        super().__init__(message)
        self.samples = samples


class ProbeNotApplicable(Exception):
    """The configuration cannot serve this probe (e.g. DFLASH rejects return_logprob)."""


class VacuousResult(Exception):
    """A probe ran but measured nothing meaningful (e.g. no prompt hit the prefix cache)."""


class CorruptResult(Exception):
    """A stored result file is truncated, hand-edited or from an unknown schema."""
