"""What a Coder raises when it produces no candidate: its own module, so each Coder and the seam share it
without importing one another."""

from __future__ import annotations


class CoderError(Exception):
    """The Coder ran and produced no candidate: the message says why, for the user."""


class CoderUnavailable(CoderError):
    """The asked-for Coder cannot run here (not installed, no API key, ...): the message says why."""
