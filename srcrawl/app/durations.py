"""Durations as a user writes them: ``90``, ``90s``, ``15m``, ``6h``, ``1d``, ``2w``.

One parser for every setting measured in time (revisit intervals, schedules),
so the command line, the environment and the config object agree.
"""

from __future__ import annotations

import re

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", re.IGNORECASE)


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``: a plain number of seconds or a number with one suffix
    of s, m, h, d or w. Raises ValueError, naming the text, for anything else
    (negative, empty, two units, unknown suffix)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a duration cannot be negative: {text}")
        return float(text)
    match = _DURATION.fullmatch(str(text))
    if match is None:
        raise ValueError(
            f"not a duration: {text!r} "
            "(write seconds, or a number with s, m, h, d or w: 90s, 6h, 1d)"
        )
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def format_duration(seconds: float) -> str:
    """The shortest exact form of ``seconds`` in the largest whole unit (``86400`` → ``1d``)."""
    for suffix in ("w", "d", "h", "m"):
        unit = _UNITS[suffix]
        if seconds >= unit and seconds % unit == 0:
            return f"{int(seconds // unit)}{suffix}"
    return f"{seconds:g}s"
