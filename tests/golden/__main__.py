"""Re-record golden digests: ``python -m tests.golden --update [CASE ...]`` (all cases when none is named)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tests import golden
from tests.golden.compute import compute
from tests.helpers import matrix_cases


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__)
    parser.add_argument("--update", nargs="*", metavar="CASE", required=True,
                        help="case ids (method-task[-variant]) to re-record; none: every case")
    args = parser.parse_args()
    cases = {golden.case_id(*c): c for c in matrix_cases()}
    unknown = [c for c in args.update if c not in cases]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; cases: {sorted(cases)}")
    records = golden.load()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.update or sorted(cases):
            records[name] = compute(*cases[name], Path(tmp))
            print(f"recorded {name}")
    golden.save(records)


if __name__ == "__main__":
    main()
