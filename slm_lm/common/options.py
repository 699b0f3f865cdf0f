"""Command-line options: the parser every command uses (a bad option is one line, `prog: error: ...`, exit
status 2) and the one type of its numeric options (a finite int or float within its range)."""
import argparse
import math

from slm_lm.common.errors import fail


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line without the usage lines (see `slm_lm.common.errors.fail`), named
    by the command (a subcommand's parser, `slm-pretrain train`, too)."""

    def error(self, message):
        fail(self.prog.split()[0], message)


def number(kind=float, low=None, high=None, *, above=None):
    """An argparse `type`: `kind` (int or float) from the text, finite, at least `low` (or more than
    `above`) and at most `high`; else `argument --option: VALUE: must be ...` naming the range."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text}: must be a finite number")
        if low is not None and value < low or above is not None and value <= above or high is not None and value > high:
            lower = f"more than {above:,}" if above is not None else f"{low:,} or more" if low is not None else ""
            upper = f"at most {high:,}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"{text}: must be {' and '.join(filter(None, (lower, upper)))}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse
