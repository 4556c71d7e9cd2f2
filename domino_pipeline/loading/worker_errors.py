"""An error raised in a DataLoader worker given back its own message: torch raises it again as ``Caught <Type> in
DataLoader worker process <i>.`` with the worker's traceback, so an entry point's one line would say only that."""

from __future__ import annotations

import re

_CAUGHT = re.compile(r"Caught (?P<type>\w+) in DataLoader worker process \d+\.\nOriginal Traceback")


def raised_in_worker(err: BaseException) -> bool:
    """Whether torch raised ``err`` again from a DataLoader worker (its message says so)."""
    return _CAUGHT.match(str(err)) is not None


def with_worker_message(err: BaseException) -> BaseException:
    """``err`` with the message it had in the worker, when torch re-raised it from one; else unchanged."""
    text = str(err)
    caught = _CAUGHT.match(text)
    message = worker_message(text) if caught else None
    if message is None:
        return err
    if caught["type"] != type(err).__name__:
        message = f"{caught['type']}: {message}"
    err.args = (message,)
    fields = re.fullmatch(r"\[Errno (\d+)\] (.*?)(?:: '(.*)')?", message, flags=re.DOTALL)
    if isinstance(err, OSError) and fields:  # torch rebuilt it from its message alone: its errno, reason, file name
        err.errno, err.strerror, err.filename = int(fields[1]), fields[2], fields[3]
    return err


def worker_message(text: str) -> str | None:
    """The message of the error that ended the traceback in ``text``, or None when it holds no traceback."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) 
              if line.removeprefix("Original ").startswith("Traceback (most recent call last):")]
    if not starts:
        return None
    rest = lines[starts[-1] + 1:]
    while rest and (rest[0].startswith(" ") or not rest[0]):  # the frames and their source lines
        rest = rest[1:]
    if not rest:
        return None
    name, colon, first = rest[0].partition(": ")
    return "\n".join([first, *rest[1:]]) if colon else ""
