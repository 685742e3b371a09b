"""Throughput against slave count: what ``bench crawl``, ``bench index`` and
``bench pagerank`` share.

A :class:`ScalingResult` holds one :class:`Row` per measured run: the runs
of srcrawl with N slaves (the scaling series), and reference rows beside
them (a one-process baseline such as raw jieba or scipy, or a peer crawler
at the same concurrency). Speedup and efficiency are computed here only:

    speedup(N)    = throughput(N) / (throughput(K) / K)
    efficiency(N) = speedup(N) / N

where K is the smallest slave count measured (1 when it was run; with a
larger K the runs below it are assumed linear, and the table says so).
With ``--rounds`` a benchmark measures each count several times and keeps
one row per count, its median run (:func:`median_of_rounds`).
The same result renders as a table, as JSON (rows, parameters, machine)
and as a PNG plot of throughput against slaves with the ideal line.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from srcrawl import __version__
from srcrawl.core.errors import ConfigError

MAX_SLAVES = 64
"""Largest slave count a benchmark accepts."""
"""Seconds between progress lines when stderr is not a terminal."""


def scaling_options(
    *, default_slaves: str, throughput: str, rounds: bool = False
) -> Callable[[Callable], Callable]:
    """``--slaves`` (as ``slaves_text``, for :func:`parse_slave_counts`), ``--json`` and
    ``--plot``: the options every scaling benchmark takes; with ``rounds``, also
    ``--rounds`` (see :func:`round_orders` and :func:`median_of_rounds`)."""
    options = [
        click.option(
            "--slaves",
            "slaves_text",
            default=default_slaves,
            show_default=True,
            help="Comma-separated slave counts to run, one fresh run each.",
        ),
        click.option(
            "--json",
            "json_path",
            type=click.Path(dir_okay=False),
            default=None,
            help="Write every row, the parameters and the machine to this JSON file.",
        ),
        click.option(
            "--plot",
            "plot_path",
            type=click.Path(dir_okay=False),
            default=None,
            help=f"Draw {throughput} against slaves with the ideal line (PNG; needs matplotlib).",
        ),
    ]
    if rounds:
        options.insert(
            1,
            click.option(
                "--rounds",
                type=click.IntRange(1, 99),
                default=1,
                show_default=True,
                help="Run every slave count this many times, alternating their order; "
                "show each count's median run.",
            ),
        )

    def decorate(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


def parse_slave_counts(text: str, *, most: int = MAX_SLAVES) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]``: distinct counts from 1 to ``most``, in the order given."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(not 1 <= n <= most for n in counts) or len(set(counts)) != len(counts):
        raise ConfigError(
            f"--slaves: expected distinct slave counts like 1,2,4 (1 to {most}), not {text!r}"
        )
    return counts


def round_orders(slaves: Sequence[int], rounds: int) -> list[list[int]]:
    """The slave counts of each round: as given, then reversed, and so on.

    On a shared machine the CPU's speed drifts over minutes; alternating the
    order puts each count as often early as late in a round, so a steady
    drift weighs on every count alike instead of favouring the one run first.
    """
    return [list(slaves) if r % 2 == 0 else list(reversed(slaves)) for r in range(rounds)]


def median_of_rounds(rounds: Sequence[Mapping[int, Row]]) -> list[Row]:
    """Per slave count, its run of median throughput over ``rounds``.

    Each round maps a slave count to its run in that round. The row chosen
    gets ``extra["round_speedups"]``: in every round, the count's throughput
    over that round's smallest count's, per slave of it (the speedup of runs
    made minutes apart, not of runs an hour apart), and ``extra["speedups"]``,
    the same as text for the table.
    """
    if not rounds:
        return []
    counts = sorted(rounds[0])
    base = counts[0]
    rows = []
    for n in counts:
        runs = sorted((r[n] for r in rounds), key=lambda row: row.throughput)
        row = runs[(len(runs) - 1) // 2]
        speedups = [
            r[n].throughput / (r[base].throughput / base) if r[base].throughput else None
            for r in rounds
        ]
        row.extra["round_speedups"] = speedups
        row.extra["speedups"] = " ".join("-" if s is None else f"{s:.2f}" for s in speedups)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Column:
    """An extra column of one benchmark: ``Row.extra[key]`` formatted with ``spec``."""

    key: str
    header: str
    spec: str = ".1f"


@dataclass
class Row:
    """One run: ``items`` done in ``seconds`` with ``slaves`` slaves.

    ``series`` None is srcrawl's scaling series; a row with a ``series``
    (a peer crawler) or without ``slaves`` (a one-process baseline) is a
    reference, shown beside the series but not part of the speedup.
    """

    slaves: int | None
    items: int
    seconds: float
    cpu_s: float | None = None
    label: str | None = None
    series: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_s_per_item(self) -> float | None:
        if self.cpu_s is None or not self.items:
            return None
        return self.cpu_s / self.items

    @property
    def scaling(self) -> bool:
        """Part of srcrawl's scaling series."""
        return self.series is None and self.slaves is not None

    @property
    def name(self) -> str:
        return self.label if self.label is not None else str(self.slaves)


@dataclass
class ScalingResult:
    """Rows of one benchmark with what it takes to render, save and plot them."""

    bench: str
    title: str
    unit: str
    """What is counted, plural (``pages``, ``iterations``): throughput is ``unit``/s."""
    per: str
    """The same, singular (``page``): CPU time is in ms per ``per``."""
    parameters: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    columns: list[Column] = field(default_factory=list)
    head: list[str] = field(default_factory=list)
    """Lines printed between the title and the table."""
    notes: list[str] = field(default_factory=list)
    """Lines printed after the table."""

    # -- speedup and efficiency ----------------------------------------------
    @property
    def series(self) -> list[Row]:
        return [r for r in self.rows if r.scaling]

    @property
    def reference(self) -> Row | None:
        """The scaling run with the fewest slaves: the speedup's unit."""
        runs = [r for r in self.series if r.throughput > 0]
        return min(runs, key=lambda r: r.slaves or 0) if runs else None

    def per_slave(self) -> float | None:
        """Throughput of one slave (extrapolated linearly when no 1-slave run exists)."""
        ref = self.reference
        return ref.throughput / ref.slaves if ref is not None and ref.slaves else None

    def speedup(self, row: Row) -> float | None:
        unit = self.per_slave()
        return row.throughput / unit if row.scaling and unit else None

    def efficiency(self, row: Row) -> float | None:
        s = self.speedup(row)
        return s / row.slaves if s is not None and row.slaves else None

    # -- table ------------------------------------------------------------------
    def render(self) -> str:
        """The title, the head lines, one table of every row, the notes."""
        headers = [
            "slaves",
            self.unit,
            "seconds",
            f"{self.unit}/s",
            "speedup",
            "efficiency",
            f"CPU ms/{self.per}",
            *(c.header for c in self.columns),
        ]
        table = [
            [
                r.name,
                str(r.items),
                f"{r.seconds:.2f}",
                _rate(r.throughput),
                _fmt(self.speedup(r), ".2f"),
                _fmt(self.efficiency(r), ".0%"),
                _fmt(None if r.cpu_s_per_item is None else 1000 * r.cpu_s_per_item, ".2f"),
                *(_fmt(r.extra.get(c.key), c.spec) for c in self.columns),
            ]
            for r in self.rows
        ]
        widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
        lines = [self.title, *self.head]
        ref = self.reference
        if ref is not None and ref.slaves != 1:
            lines.append(
                f"(no 1-slave run: speedup assumes {ref.slaves} slaves are {ref.slaves}× one)"
            )
        lines.append(_line(headers, widths))
        lines += [_line(row, widths) for row in table]
        return "\n".join([*lines, *self.notes])

    # -- JSON ---------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        """Every row with its derived figures, the parameters and the machine."""
        rows = []
        for r in self.rows:
            rows.append(
                {
                    "label": r.name,
                    "slaves": r.slaves,
                    "series": r.series or ("srcrawl" if r.scaling else "baseline"),
                    "items": r.items,
                    "seconds": r.seconds,
                    "throughput": r.throughput,
                    "cpu_s": r.cpu_s,
                    "cpu_s_per_item": r.cpu_s_per_item,
                    "speedup": self.speedup(r),
                    "efficiency": self.efficiency(r),
                    **r.extra,
                }
            )
        return {
            "bench": self.bench,
            "unit": self.unit,
            "parameters": self.parameters,
            "machine": machine_info(),
            "rows": rows,
            "notes": [*self.head, *self.notes],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), indent=2, sort_keys=True) + "\n")

    # -- plot -----------------------------------------------------------------------
    def plot(self, path: str | Path) -> None:
        """Throughput against slaves as a PNG: the series, the ideal line, the references."""
        pyplot = load_pyplot()
        fig, ax = pyplot.subplots(figsize=(7, 4.5), dpi=100)
        try:
            series = sorted(self.series, key=lambda r: r.slaves or 0)
            xs = [r.slaves for r in series]
            ax.plot(xs, [r.throughput for r in series], "o-", label="srcrawl")
            unit = self.per_slave()
            if unit and xs:
                top = max(xs)
                ax.plot(
                    [0, top],
                    [0, unit * top],
                    "--",
                    color="grey",
                    label="ideal (linear from the first run)",
                )
            peers: dict[str, list[Row]] = {}
            for r in self.rows:
                if r.series is not None and r.slaves is not None:
                    peers.setdefault(r.series, []).append(r)
            for name, rows in peers.items():
                rows.sort(key=lambda r: r.slaves or 0)
                ax.plot(
                    [r.slaves for r in rows],
                    [r.throughput for r in rows],
                    "s-",
                    label=f"{name} (same total concurrency)",
                )
            for r in self.rows:
                if r.slaves is None:
                    ax.axhline(r.throughput, linestyle=":", linewidth=1, color="tab:red")
                    ax.annotate(r.name, (0, r.throughput), fontsize=7, va="bottom")
            ax.set_xlabel("slaves")
            ax.set_ylabel(f"{self.unit}/s")
            ax.set_title(self.title, fontsize=9)
            ax.set_xlim(left=0)
            ax.set_ylim(bottom=0)
            if xs:
                ax.set_xticks(sorted(set(xs)))
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            fig.savefig(str(path), format="png")
        finally:
            pyplot.close(fig)

    def save(self, *, json_path: str | None, plot_path: str | None) -> None:
        """Write the ``--json`` and ``--plot`` files that were asked for."""
        if json_path:
            self.write_json(json_path)
        if plot_path:
            self.plot(plot_path)


def load_pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend; ConfigError when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as e:
        raise ConfigError(
            "--plot needs matplotlib, which is not installed: pip install 'srcrawl[plot]'"
        ) from e
    return pyplot


def check_outputs(*, json_path: str | None, plot_path: str | None) -> None:
    """Fail before a long run, not after it: matplotlib present, output directories there."""
    if plot_path:
        load_pyplot()
    for option, path in (("--json", json_path), ("--plot", plot_path)):
        if path and not Path(path).resolve().parent.is_dir():
            raise ConfigError(f"{option}: directory of {path!r} does not exist")


def machine_info() -> dict[str, Any]:
    """What the figures depend on: cores, Python, the OS, the load while it ran."""
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "srcrawl": __version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with contextlib.suppress(OSError):  # not every platform has a load average
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _rate(x: float) -> str:
    return f"{x:,.2f}" if x < 100 else f"{x:,.1f}" if x < 10_000 else f"{x:,.0f}"


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    first, *rest = cells
    return (
        "  "
        + first.ljust(widths[0])
        + "".join("  " + c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))
    )
