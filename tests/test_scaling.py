"""Throughput against slave count (benchmarks/scaling.py): speedup, table, JSON, plot, progress."""

from __future__ import annotations

import io
import json
import os
import platform
import sys

import pytest

from srcrawl.benchmarks.scaling import (
    Column,
    Row,
    ScalingResult,
    check_outputs,
    load_pyplot,
    median_of_rounds,
    parse_slave_counts,
    round_orders,
)
from srcrawl.core.errors import ConfigError
from srcrawl.core.progress import ProgressLine

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def result(*rows: Row) -> ScalingResult:
    return ScalingResult(
        bench="crawl",
        title="crawl benchmark: test",
        unit="pages",
        per="page",
        parameters={"hosts": 9},
        rows=list(rows),
        columns=[Column("hit", "link cache hits", ".1%"), Column("note", "note", "")],
    )


def scaling() -> ScalingResult:
    return result(
        Row(None, 100, 20.0, 4.0, label="one process"),
        Row(1, 100, 10.0, 1.0, extra={"hit": 0.5}),
        Row(2, 100, 100 / 18, 1.2, extra={"hit": 0.25, "note": "x"}),
        Row(4, 100, 100 / 30, None),
        Row(4, 100, 2.5, 2.0, label="peer (16 concurrent)", series="peer"),
    )


def test_speedup_and_efficiency_against_the_one_slave_run() -> None:
    r = scaling()
    one, two, four = r.series
    assert [x.slaves for x in r.series] == [1, 2, 4]
    assert r.speedup(one) == pytest.approx(1.0) and r.efficiency(one) == pytest.approx(1.0)
    assert r.speedup(two) == pytest.approx(1.8) and r.efficiency(two) == pytest.approx(0.9)
    assert r.speedup(four) == pytest.approx(3.0) and r.efficiency(four) == pytest.approx(0.75)
    baseline, peer = r.rows[0], r.rows[-1]
    assert r.speedup(baseline) is None and r.speedup(peer) is None
    assert two.cpu_s_per_item == pytest.approx(0.012) and four.cpu_s_per_item is None


def test_without_a_one_slave_run_the_smallest_count_is_taken_as_linear() -> None:
    r = result(Row(2, 100, 10.0), Row(4, 100, 6.25))
    assert r.per_slave() == pytest.approx(5.0)
    assert r.speedup(r.rows[0]) == pytest.approx(2.0)
    assert r.speedup(r.rows[1]) == pytest.approx(3.2)
    assert r.efficiency(r.rows[1]) == pytest.approx(0.8)
    assert "no 1-slave run" in r.render()


def test_rounds_alternate_the_order_of_slave_counts() -> None:
    assert round_orders([1, 2, 4], 3) == [[1, 2, 4], [4, 2, 1], [1, 2, 4]]
    assert round_orders([2], 2) == [[2], [2]]


def test_each_count_keeps_its_median_run_and_the_speedup_of_every_round() -> None:
    # pages/s: round 1 at 1 and 2 slaves 100 / 170, round 2 80 / 150, round 3 120 / 190
    rounds = [
        {1: Row(1, 100, 1.0, label="r1"), 2: Row(2, 100, 100 / 170, label="r1")},
        {1: Row(1, 100, 100 / 80, label="r2"), 2: Row(2, 100, 100 / 150, label="r2")},
        {1: Row(1, 100, 100 / 120, label="r3"), 2: Row(2, 100, 100 / 190, label="r3")},
    ]
    one, two = median_of_rounds(rounds)
    # the median of 80, 100, 120 is round 1's run; of 150, 170, 190 too
    assert (one.slaves, one.label, two.slaves, two.label) == (1, "r1", 2, "r1")
    assert one.extra["round_speedups"] == pytest.approx([1.0, 1.0, 1.0])
    assert two.extra["round_speedups"] == pytest.approx([1.7, 1.875, 190 / 120])
    assert two.extra["speedups"] == "1.70 1.88 1.58"
    r = result(one, two)
    assert r.speedup(two) == pytest.approx(1.7)
    # with an even number of rounds the lower of the two middle runs is taken
    low, _ = median_of_rounds(rounds[1:])
    assert low.label == "r2"
    assert median_of_rounds([]) == []


def test_render_one_table_with_the_extra_columns() -> None:
    text = scaling().render()
    lines = text.splitlines()
    assert lines[0] == "crawl benchmark: test"
    header = lines[1].split()
    assert header[:3] == ["slaves", "pages", "seconds"]
    assert "pages/s" in header and "speedup" in header and "efficiency" in header
    assert "ms/page" in lines[1] and "link cache hits" in lines[1]
    rows = {ln.split()[0]: ln for ln in lines[2:]}
    assert set(rows) == {"one", "1", "2", "4", "peer"}
    assert rows["2"].split()[:6] == ["2", "100", "5.56", "18.00", "1.80", "90%"]
    assert rows["2"].split()[6:] == ["12.00", "25.0%", "x"]
    assert rows["1"].split()[-1] == "50.0%"
    assert rows["4"].split() == ["4", "100", "3.33", "30.00", "3.00", "75%"]  # no CPU, no extras
    assert rows["one"].split()[2:6] == ["100", "20.00", "5.00", "40.00"]  # no speedup
    # every row's columns line up under the header
    width = len(lines[1])
    assert all(len(ln.rstrip()) <= width for ln in lines[2:])
    assert rows["2"].index("90%") + 3 == lines[1].index("efficiency") + len("efficiency")


def test_json_holds_every_row_the_parameters_and_the_machine(tmp_path) -> None:
    path = tmp_path / "bench.json"
    scaling().write_json(path)
    data = json.loads(path.read_text())
    assert data["bench"] == "crawl" and data["unit"] == "pages"
    assert data["parameters"] == {"hosts": 9}
    assert data["machine"]["cores"] == os.cpu_count()
    assert data["machine"]["python"] == platform.python_version()
    rows = data["rows"]
    assert [r["label"] for r in rows] == ["one process", "1", "2", "4", "peer (16 concurrent)"]
    assert [r["series"] for r in rows] == ["baseline", "srcrawl", "srcrawl", "srcrawl", "peer"]
    two = rows[2]
    assert two["slaves"] == 2 and two["items"] == 100
    assert two["throughput"] == pytest.approx(18.0)
    assert two["speedup"] == pytest.approx(1.8) and two["efficiency"] == pytest.approx(0.9)
    assert two["cpu_s_per_item"] == pytest.approx(0.012)
    assert two["hit"] == 0.25 and two["note"] == "x"
    assert rows[0]["speedup"] is None and rows[4]["efficiency"] is None


@pytest.mark.slow
def test_plot_writes_a_png_of_throughput_against_slaves(tmp_path) -> None:
    path = tmp_path / "bench.png"
    scaling().plot(path)
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000
    from matplotlib import image

    height, width, _channels = image.imread(str(path)).shape
    assert (width, height) == (700, 450)


def test_missing_matplotlib_is_a_config_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ConfigError, match=r"pip install 'srcrawl\[plot\]'"):
        load_pyplot()
    with pytest.raises(ConfigError, match="matplotlib"):
        check_outputs(json_path=None, plot_path=str(tmp_path / "x.png"))
    check_outputs(json_path=str(tmp_path / "x.json"), plot_path=None)  # JSON needs nothing


def test_outputs_in_a_missing_directory_are_refused_before_the_run(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--json"):
        check_outputs(json_path=str(tmp_path / "nope" / "x.json"), plot_path=None)


@pytest.mark.parametrize(
    ("text", "counts"), [("1,2,3,4", [1, 2, 3, 4]), ("4, 1", [4, 1]), ("2", [2]), ("1,2,", [1, 2])]
)
def test_slave_counts_parse(text: str, counts: list[int]) -> None:
    assert parse_slave_counts(text) == counts


@pytest.mark.parametrize("text", ["1,x", "0", "", "1,1", "65", "-1", "1.5"])
def test_bad_slave_counts_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--slaves: "):
        parse_slave_counts(text)


def test_progress_line_rewrites_on_a_terminal_and_throttles_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    line = ProgressLine(tty)
    line.update("1 slave: 10 pages")
    line.update("1 slave: 20 pages")
    line.say("done")
    assert tty.getvalue() == "\r1 slave: 10 pages\033[K\r1 slave: 20 pages\033[K\ndone\n"

    log = io.StringIO()
    line = ProgressLine(log, interval=3600)
    line.update("a")
    line.update("b")  # within the interval: dropped
    line.update("c", force=True)
    line.done()
    assert log.getvalue() == "a\nc\n"
