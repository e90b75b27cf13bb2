"""Progress off a terminal is a log line now and then, not carriage-return redraws."""

import logging

from bench import progress as P


def test_off_a_terminal_progress_is_log_lines(monkeypatch, caplog):
    monkeypatch.delenv("BENCH_QUIET", raising=False)
    monkeypatch.setattr(P.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(P, "LINE_EVERY_S", 0.0)
    bar = P.progress(total=4, desc="dense:w1", initial=1)
    assert isinstance(bar, P.LineProgress)
    with caplog.at_level(logging.INFO, logger="bench"):
        bar.update(1)
        bar.set_postfix(loss="0.5000")
        bar.update(2)
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("dense:w1: 2/4 steps (50%), ") and lines[-1].endswith("/s, loss=0.5000")
    assert all("\r" not in line for line in lines)


def test_quiet_disables_it(monkeypatch):
    monkeypatch.setenv("BENCH_QUIET", "1")
    assert P.progress(total=3, desc="x").disable
