"""The errors a raw run's files give: one line naming the file and the problem."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path


class RunError(ValueError):
    """A run folder whose files are missing, unreadable or lack a field."""


class MissingFieldError(RunError):
    """Fields ``missing`` from ``where`` data holding ``available``; ``hinted`` names the profile keys."""

    def __init__(self, path: Path | object, where: str, missing: Collection[str], available: Collection[str],
                 hint: str = "") -> None:
        """``path``: a local file's path, or a remote file (its ``str`` is its URL)."""
        self.path, self.where, self.missing, self.available = path, where, list(missing), sorted(available)
        super().__init__(f"{path}: no {where} data {', '.join(self.missing)} (has {self.available}){hint}")

    def hinted(self, keys: Mapping[str, str | None]) -> MissingFieldError:
        """This error, its line ending with the profile keys (``keys``: field name -> key) to set."""
        named = [keys[name] for name in self.missing if keys.get(name)]
        hint = f"; set {' and '.join(named)} to one of them" if named else ""
        return MissingFieldError(self.path, self.where, self.missing, self.available, hint)
