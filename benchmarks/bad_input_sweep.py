"""Feed every `graphsim` command a hostile user's inputs and count what breaks the bad-input rule.

    python benchmarks/bad_input_sweep.py [--fast] [--only SUBSTRING] [--show-ok]

The cases and the check live in tests/cli/bad_input_cases.py (the same table the test suite runs): exit 2
with one `error:` line (plus at most a hint) for bad input, exit 0 for valid input, never a traceback, and an
output file that existed before a refused run left as it was. Runs in a fresh, empty $GRAPHSIM_HOME (no
profile.db, no automatic profile build), in this process (one torch import for every case); both temporary
folders are removed at the end.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="graphsim-sweep-home-") as home, \
            tempfile.TemporaryDirectory(prefix="graphsim-sweep-") as work:
        return _sweep(Path(home), Path(work))


def _sweep(home: Path, work: Path) -> int:
    ap = argparse.ArgumentParser(description="Feed every graphsim command bad input; count what breaks the rule.")
    ap.add_argument("--fast", action="store_true", help="only the cases the default test suite runs")
    ap.add_argument("--only", default="", help="only cases whose id holds this text")
    ap.add_argument("--show-ok", action="store_true", help="print every case, not only the failures")
    ap.add_argument("--stall", type=float, default=120, help="seconds after which a case's stack is printed")
    args = ap.parse_args()
    os.environ["GRAPHSIM_HOME"] = str(home)
    os.environ["GRAPHSIM_NO_AUTO_PROFILE"] = "1"
    spec = importlib.util.spec_from_file_location("bad_input_cases", ROOT / "tests" / "cli" / "bad_input_cases.py")
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    sys.modules["bad_input_cases"] = sweep  # its dataclasses look their module up
    spec.loader.exec_module(sweep)
    cases, make_files, run_case = sweep.cases, sweep.make_files, sweep.run_case

    make_files(work)
    todo = [c for c in cases() if args.only in c.id and not (args.fast and c.slow)]
    failed = known = 0
    t0 = time.monotonic()
    for case in todo:
        t = time.monotonic()
        print(f"...  {case.id}", file=sys.stderr, flush=True)
        faulthandler.dump_traceback_later(args.stall, exit=False)  # a stuck case shows where it is stuck
        o = run_case(case, work)
        faulthandler.cancel_dump_traceback_later()
        dt = time.monotonic() - t
        if o.problems and case.known:
            known += 1
            print(f"KNOWN {case.id} ({dt:.1f} s): {case.known}")
        elif o.problems:
            failed += 1
            print(f"FAIL {case.id} ({dt:.1f} s): {'; '.join(o.problems)}")
        elif args.show_ok:
            line = (o.err.strip().splitlines() or ["(ok)"])[0]
            print(f"ok   {case.id} ({dt:.1f} s): exit {o.code} {line[:160]}")
        sys.stdout.flush()
    print(f"{len(todo)} cases, {failed} failed, {known} known, {len(todo) - failed - known} passed "
          f"in {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
