"""``agent-gym report``: tables and a self-contained HTML page for trajectory files.

Reads one or more ``.jsonl`` / ``.parquet`` files written by ``agent-gym rollout``
or :mod:`agent_gym.export` (an interrupted file too), prints the tables and writes
the HTML page (figures need the ``report`` extra: ``pip install 'agent-gym[report]'``).
Several files are shown side by side, e.g. before and after training.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

__all__ = ["add_parser", "run"]

_DEFAULT_OUT = "report.html"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``report`` subcommand on ``subparsers``."""
    parser = subparsers.add_parser(
        "report",
        help="tables and an HTML page of trajectory files",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="trajectory files (.jsonl or .parquet)")
    parser.add_argument(
        "--out", default=None, metavar="FILE",
        help=f"HTML page to write (default {_DEFAULT_OUT}; needs the 'report' extra)",
    )
    parser.add_argument(
        "--by", default=None, metavar="FIELD",
        help="task field splitting the rows, dotted for nested keys (default: family, when tasks have one)",
    )
    parser.add_argument("--no-html", action="store_true", help="print the tables only")
    parser.add_argument("--dpi", type=int, default=80, metavar="N", help="resolution of the figures (default 80)")
    return parser


def run(args: argparse.Namespace, *, stdout: TextIO | None = None) -> int:
    """Run ``agent-gym report``.

    Returns:
        0 on success; 1 when the HTML page was asked for with ``--out`` but matplotlib
        is missing (the tables are printed first); 2 on unreadable input or bad arguments.
    """
    out = stdout or sys.stdout
    from agent_gym.errors import MissingExtraError, ReportInputError
    from agent_gym.report import load_report

    if args.dpi < 10:
        print(f"agent-gym report: --dpi: expected an int >= 10, got {args.dpi}", file=sys.stderr)
        return 2
    if args.out is not None and not args.out.lower().endswith((".html", ".htm")):
        print(f"agent-gym report: --out: expected a file ending in .html, got {args.out!r}", file=sys.stderr)
        return 2
    try:
        report = load_report(*args.files, by=args.by)
    except ReportInputError as exc:
        print(f"agent-gym report: {exc}", file=sys.stderr)
        return 2
    for f in report.files:
        if f.skipped_lines:
            print(f"{f.path}: skipped {f.skipped_lines} incomplete last line (the writer was interrupted)", file=out)
    print(report.to_text(), file=out)
    if args.no_html:
        return 0
    target = args.out or _DEFAULT_OUT
    try:
        path = report.write_html(target, dpi=args.dpi)
    except MissingExtraError as exc:
        if args.out is None:
            print(f"no HTML page written: {exc}", file=sys.stderr)
            return 0
        print(f"agent-gym report: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {path}", file=out)
    return 0
