"""What every subcommand shares: one argparse style (`add_arguments(parser)` + `run(args)` per
app module), bad arguments as one `error:` line and exit status 2, Hydra overrides passed as
positional KEY=VALUE arguments."""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from typing import Callable, List, NoReturn, Optional


class Parser(argparse.ArgumentParser):
    """argparse with errors as one line: `error: MESSAGE (decodelab CMD --help)`, exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def make_parser(name: str, module) -> Parser:
    doc = (module.__doc__ or "").strip()
    p = Parser(
        prog=f"decodelab {name}",
        description=doc.split("\n\n")[0],
        epilog="\n\n".join(doc.split("\n\n")[1:]) or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(p)
    return p


def run_module(name: str, module, argv: List[str]) -> int:
    """Parse `argv` with the module's arguments and run it; returns the exit status."""
    p = make_parser(name, module)
    try:
        args = p.parse_intermixed_args(argv)
    except SystemExit as e:  # --help (0) or a bad argument (2, already one line)
        return int(e.code or 0)
    return int(module.run(args) or 0)


def is_override(arg: str) -> bool:
    """A Hydra override (KEY=VALUE, +KEY=VALUE, ~KEY) rather than a name or a path."""
    return "=" in arg or arg.startswith(("~", "+"))


def workers(text: str) -> int:
    """argparse type of -j/--jobs: a worker count (an integer >= 1)."""
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


workers.__name__ = "worker count (an integer >= 1)"


def designs(text: str) -> int:
    """argparse type of --max-designs: a design count (an integer >= 1)."""
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


designs.__name__ = "design count (an integer >= 1)"


def add_max_designs(ap) -> None:
    """--max-designs: the most designs a sweep may expand to (it is counted before expanding)."""
    ap.add_argument(
        "--max-designs",
        type=designs,
        help="refuse a sweep of more designs than this (default: $DECODELAB_MAX_DESIGNS or 1,000,000)",
    )


def errors(text: str) -> int:
    """Print each line of `text` as `error: LINE` on stderr; exit status 2."""
    for line in str(text).strip().splitlines() or ["(no message)"]:
        print(f"error: {line}", file=sys.stderr)
    return 2


def quiet_on_closed_pipe(fn: Callable[..., Optional[int]], *args) -> Optional[int]:
    """fn(*args) and a flush of its output; output into a pipe its reader closed (`decodelab --help |
    head`) ends quietly with a shell's status for it, 141 (128 + SIGPIPE), not a traceback: the rest
    of the output goes to /dev/null (Python's documented handling of SIGPIPE, signal module notes)."""
    try:
        code = fn(*args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def best_time(fn, repeat: int) -> float:
    """Best of `repeat` timed calls (seconds): the benchmarks' one timer."""
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def narrow_table(title: str, names: List[str], texts: List[List[str]], numeric: List[bool], width=None):
    """A rich Table that fits the terminal (80 columns too) without truncating a name to
    `lla…`: no vertical rules, two spaces between columns, each column as wide as its longest
    value or header word (headers wrap at spaces, `_` reads as a space). Text columns whose
    values have spaces (run labels) share what is left and wrap at their spaces; anything still
    too wide folds onto the next line rather than being cut."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    width = width or Console().width
    headers = [n.replace("_", " ") for n in names]
    words = [max([len(w) for w in h.split()] + [1]) for h in headers]
    widest = [max([len(row[i]) for row in texts] + [words[i]]) for i in range(len(names))]
    wraps = [not num and any(" " in row[i] for row in texts) for i, num in enumerate(numeric)]
    free = width - 2 * len(names) - sum(w for w, wr in zip(widest, wraps) if not wr) + 1
    n_wrap = max(sum(wraps), 1)
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    for i, (header, num) in enumerate(zip(headers, numeric)):
        w = widest[i]
        if wraps[i]:
            longest_word = max(len(x) for row in texts for x in row[i].split() or [""])
            w = max(min(w, free // n_wrap), longest_word, words[i])
        # rich's width includes the one space of right padding
        t.add_column(header, justify="right" if num else "left", overflow="fold", width=w + 1)
    for row in texts:
        t.add_row(*row)
    return t
