"""`python -m components.scoring --tasks T --answers A --out S`: score ColBench backend answers.

Same contract as `sweetflow score` (see backend.score_files): writes S as JSONL score rows and
prints the summary `{"n", "tests_passed", "success_rate"}` as the last line of stdout.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from components.tasks.colbench_backend.scoring import DEFAULT_CACHE_DIR, score_files


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m components.scoring", description=__doc__)
    parser.add_argument("--tasks", type=Path, required=True, help="ColBench backend tasks JSONL")
    parser.add_argument("--answers", type=Path, required=True, help='rows {"index", "answer"}')
    parser.add_argument("--out", type=Path, required=True, help="scores JSONL to write")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="reference-output cache directory")
    parser.add_argument("--workers", type=int, default=None, help="fork-servers (default: all cores)")
    args = parser.parse_args(argv)
    return score_files(args.tasks, args.answers, args.out, cache_dir=args.cache_dir, workers=args.workers)


if __name__ == "__main__":
    main()
