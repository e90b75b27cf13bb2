"""Errors whose message is meant for the user as one line (no traceback, exit code 2)."""


class UserError(Exception):
    """Bad input found at run time (e.g. configured real data that is missing)."""
