import click
import pytest
from click.testing import CliRunner

from srcrawl.app.cli_options import DURATION
from srcrawl.app.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("1.5", 1.5),
        ("15m", 900),
        ("6h", 21600),
        ("1d", 86400),
        ("2W", 1209600),
        (" 3h ", 10800),
        (42, 42),
    ],
)
def test_durations_read_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-5", "1h30m", "5y", "1e3", "nan", True])
def test_bad_durations_are_named_in_the_error(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_picks_the_largest_whole_unit():
    assert [format_duration(s) for s in (86400, 3600 * 36, 90, 1.5, 604800)] == [
        "1d",
        "36h",
        "90s",
        "1.5s",
        "1w",
    ]


def test_click_option_reports_a_bad_duration():
    @click.command()
    @click.option("--every", type=DURATION, default="1h")
    def cmd(every):
        click.echo(repr(every))

    assert CliRunner().invoke(cmd, []).output.strip() == "3600.0"
    assert CliRunner().invoke(cmd, ["--every", "2d"]).output.strip() == "172800.0"
    bad = CliRunner().invoke(cmd, ["--every", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.output
