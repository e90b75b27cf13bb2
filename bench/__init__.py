"""bench: a benchmark and leaderboard harness for conditional-computation methods."""

__version__ = "0.1.0"
