"""What every subcommand shares: one argparse style (`add_arguments(parser)` + `run(args)` per
app module), bad arguments as one `error:` line and exit status 2, Hydra overrides passed as
positional KEY=VALUE arguments."""

from __future__ import annotations

import argparse
import sys
import timeit
from typing import List, NoReturn


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


def errors(text: str) -> int:
    """Print each line of `text` as `error: LINE` on stderr; exit status 2."""
    for line in str(text).strip().splitlines() or ["(no message)"]:
        print(f"error: {line}", file=sys.stderr)
    return 2


def best_time(fn, repeat: int) -> float:
    """Best of `repeat` timed calls (seconds): the benchmarks' one timer."""
    return min(timeit.repeat(fn, number=1, repeat=repeat))
