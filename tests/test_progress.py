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


def test_a_log_line_says_the_time_left_at_the_rate_so_far(monkeypatch, caplog):
    monkeypatch.delenv("BENCH_QUIET", raising=False)
    monkeypatch.setattr(P.sys.stderr, "isatty", lambda: False, raising=False)
    clock = iter([100.0, 160.0, 160.0, 220.0, 220.0])  # starts at 100 s; two lines 60 s apart (each reads twice)
    monkeypatch.setattr(P.time, "perf_counter", lambda: next(clock))
    bar = P.progress(total=10_000, desc="cct:cct", initial=1000)
    with caplog.at_level(logging.INFO, logger="bench"):
        bar.update(120)  # 2 steps/s: 8880 steps take 74 min
        bar.update(7200 - 1120 + 1000)  # 7200 steps in 120 s
    first, second = (r.getMessage() for r in caplog.records)
    assert first == "cct:cct: 1120/10000 steps (11%), 2.0/s, about 1 h 14 min left"
    assert second == "cct:cct: 8200/10000 steps (82%), 60.0/s, about 30 s left"
    assert [P.time_left(s) for s in (89.4, 90, 3569, 3599, 7290)] == [
        "about 89 s left", "about 2 min left", "about 59 min left", "about 1 h 00 min left", "about 2 h 02 min left"]


def test_quiet_disables_it(monkeypatch):
    monkeypatch.setenv("BENCH_QUIET", "1")
    assert P.progress(total=3, desc="x").disable
