"""`python -m report DIR`: write DIR/report.html from a replay or demo output directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from report.html import render_report_from_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m report", description=__doc__)
    parser.add_argument("out_dir", type=Path, help="directory holding decisions.jsonl, timeline.jsonl, …")
    parser.add_argument("--title", default="Guardian incident report")
    args = parser.parse_args(argv)
    if not args.out_dir.is_dir():
        print(f"not a directory: {args.out_dir}", file=sys.stderr)
        return 2
    try:
        path = render_report_from_dir(args.out_dir, title=args.title)
    except ValueError as exc:
        print(f"cannot read {args.out_dir}: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
