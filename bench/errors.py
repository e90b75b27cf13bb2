"""Errors whose message is meant for the user as one line (no traceback, exit code 2), and "did you mean"."""

from __future__ import annotations

from typing import Iterable


class UserError(Exception):
    """Bad input found at run time (e.g. configured real data that is missing)."""


def near_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The choices closest to ``word`` for a "did you mean" hint, ignoring case (``ACT`` finds ``act``).

    difflib's ratio is case-sensitive, so both sides are compared in lower case and the choices are
    returned as spelled.
    """
    import difflib

    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    if word.lower() in by_lower:  # the same name in another case: that is the one meant
        return [by_lower[word.lower()]]
    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=cutoff)]
