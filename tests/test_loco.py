"""Leaving one corpus out: each weight chosen on the other corpora (ties to the default),
judged on the corpus left out against the default and the signal off."""

from __future__ import annotations

from dataclasses import replace

import pytest

from srcrawl.benchmarks.loco import Figures, choose, figures_of, leave_one_out, render


def grid(**corpora: tuple[float, ...]) -> dict[str, dict[float, Figures]]:
    """corpus → value (0, 1, 2) → figures, from each corpus's MRRs at those values."""
    return {c: {float(v): Figures(m, m) for v, m in enumerate(mrrs)} for c, mrrs in corpora.items()}


def test_the_value_chosen_is_the_best_mean_without_the_corpus_left_out() -> None:
    figures = grid(a=(0.5, 0.9, 0.6), b=(0.5, 0.8, 0.6), c=(0.5, 0.1, 1.0))
    # without c, 1 is best (0.85 against 0.6); without a, 2 (0.8 against 0.45)
    assert choose(figures, "c", default=2.0) == 1.0
    assert choose(figures, "a", default=1.0) == 2.0


def test_a_tie_goes_to_the_default_then_to_the_first_in_the_grid() -> None:
    figures = grid(a=(0.5, 0.7, 0.7), b=(0.5, 0.7, 0.7), c=(0.0, 0.0, 0.0))
    assert choose(figures, "c", default=2.0) == 2.0
    assert choose(figures, "c", default=0.0) == 1.0


def test_each_corpus_left_out_is_judged_on_itself() -> None:
    figures = grid(a=(0.5, 0.9, 0.6), b=(0.5, 0.8, 0.6), c=(0.5, 0.4, 1.0))
    result = leave_one_out("title", figures, default=2.0)
    chosen = {r.corpus: r.chosen for r in result.rows}
    assert chosen == {"a": 2.0, "b": 2.0, "c": 1.0}
    c = next(r for r in result.rows if r.corpus == "c")
    assert (c.at_chosen.mrr, c.at_default.mrr, c.at_off.mrr) == (0.4, 1.0, 0.5)
    # against the signal off: a and b better, c worse; against the default, c worse
    assert result.helps() == (2, 0, 1)
    assert result.beats_default() == (0, 2, 1)
    assert result.verdict() == "helps"
    assert "corpus left out" in render([result]) and "title (default 2" in render([result])


def test_a_default_beaten_on_most_corpora_left_out_is_to_change() -> None:
    figures = grid(a=(0.5, 0.9, 0.6), b=(0.5, 0.8, 0.6), c=(0.5, 0.7, 0.6))
    result = leave_one_out("anchor", figures, default=2.0)
    assert {r.chosen for r in result.rows} == {1.0}
    assert result.beats_default() == (3, 0, 0)
    assert result.verdict() == "change the default to 1"


def test_a_signal_that_changes_nothing_is_neutral() -> None:
    result = leave_one_out("boiler", grid(a=(0.5,) * 3, b=(0.6,) * 3, c=(0.7,) * 3), 1.0)
    assert all(r.chosen == 1.0 for r in result.rows)
    assert result.helps() == (0, 3, 0) and result.verdict() == "neutral"


def test_figures_of_ranks() -> None:
    f = figures_of([1, 2, None, 4])
    assert f.mrr == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert f.s3 == pytest.approx(0.5)


def test_a_default_that_beats_the_signal_off_helps_when_the_choice_is_off() -> None:
    # off (0) wins on the mean without a or b, but the default (1) beats it on a, b and c
    figures = grid(a=(0.5, 0.6, 0.0), b=(0.5, 0.6, 0.0), c=(0.5, 0.6, 0.0), d=(1.0, 0.0, 0.0))
    result = leave_one_out("rank", figures, default=1.0)
    assert [r.chosen for r in result.rows] == [0.0, 0.0, 0.0, 1.0]
    assert result.default_helps() == (3, 0, 1)
    assert result.verdict() == "the default helps"
    assert result.means == pytest.approx({0.0: 0.625, 1.0: 0.45, 2.0: 0.0})


def test_weights_chosen_together_by_the_best_mean_of_every_combination() -> None:
    # two weights, each alone at its default no better: together (title 1, near 1) best
    # on the corpora kept, judged on each left out against the defaults (3, 0)
    from srcrawl.benchmarks.loco import joint_leave_one_out, render_joint, settings_of

    settings = settings_of({"title": (1.0, 3.0), "near": (0.0, 1.0)})
    assert settings == [
        (("title", 1.0), ("near", 0.0)),
        (("title", 1.0), ("near", 1.0)),
        (("title", 3.0), ("near", 0.0)),
        (("title", 3.0), ("near", 1.0)),
    ]
    default, together = settings[2], settings[1]

    def corpus(at_default: float, at_together: float) -> dict:
        return {s: Figures(at_together if s == together else at_default, 1.0) for s in settings}

    figures = {"a": corpus(0.8, 0.9), "b": corpus(0.7, 0.8), "c": corpus(0.9, 0.85)}
    result = joint_leave_one_out(figures, default)
    assert [r.chosen for r in result.rows] == [together, together, together]
    assert result.beats_default() == (2, 0, 1)
    assert result.verdict() == "change the defaults to title 1, near 1"
    assert "chosen vs default: better on 2, same on 0, worse on 1" in render_joint(result)
    # a corpus whose loss outweighs the others' gains keeps the defaults where it counts
    figures["c"] = corpus(0.9, 0.2)
    assert joint_leave_one_out(figures, default).rows[0].chosen == default
    assert joint_leave_one_out(figures, default).verdict().startswith("keep the defaults")


@pytest.mark.slow
def test_the_known_item_test_web_is_a_corpus_of_the_joint_choice(redis_url, tmp_path) -> None:
    # the test web stored and indexed by this code's `srcrawl index`, ranked with any
    # weights: the weights before keep its pages first (titles, links' words, menus);
    # with the title and anchor weighed as the manuals alone choose, the pages named by
    # the words that link to them are lost. The ranks are kept: asked again, not searched
    from srcrawl.benchmarks.loco import BEFORE_JOINT, KnownWebRanks
    from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS
    from srcrawl.settings.config import Config
    from srcrawl.sql.database_url import DatabaseURL

    db = DatabaseURL(kind="sqlite", path=str(tmp_path / "x.db"))
    cfg = Config(redis_url=redis_url, db=db, job="loco-web", home=tmp_path / "home")
    said: list[str] = []
    web = KnownWebRanks(cfg, said.append)
    try:
        before = web.figures(BEFORE_JOINT, "before")
        now = web.figures(DEFAULT_WEIGHTS, "now")
        manuals = web.figures(
            replace(DEFAULT_WEIGHTS, title=0.0, anchor=1.0), "the manuals' choice"
        )
        asked = len(said)
        assert web.figures(DEFAULT_WEIGHTS, "now") == now and len(said) == asked
    finally:
        web.close()
    assert before.mrr > 0.99 and now.mrr > 0.9 and now.s3 > 0.98
    assert manuals.mrr < now.mrr - 0.2


def test_the_long_queries_grid_starts_at_the_short_queries_weights() -> None:
    # the first value of each is "weighed as a short query": the weights before long
    # queries had their own are a combination of the grid, the one judged against
    from srcrawl.benchmarks.loco import BEFORE_LONG, LONG_GRID, joint_settings, settings_of
    from srcrawl.indexer.search.weights import DEFAULT_WEIGHTS

    first = {k: values[0] for k, values in LONG_GRID.items()}
    assert first == {
        "long_title": DEFAULT_WEIGHTS.title,
        "long_anchor": DEFAULT_WEIGHTS.anchor,
        "some_words_rise": 0.0,
    }
    assert replace(DEFAULT_WEIGHTS, **first) == BEFORE_LONG
    assert len(settings_of(LONG_GRID)) == 24
    # the defaults (long_title 0.1, where the grid has 0) are measured beside the grid
    default = tuple((k, float(getattr(DEFAULT_WEIGHTS, k))) for k in LONG_GRID)
    assert default not in settings_of(LONG_GRID)
    assert joint_settings(LONG_GRID, default) == [*settings_of(LONG_GRID), default]
    on_grid = tuple((k, v[0]) for k, v in LONG_GRID.items())
    assert joint_settings(LONG_GRID, on_grid) == settings_of(LONG_GRID)


def test_joint_and_long_are_two_choices() -> None:
    # through the whole command line (the subcommand alone would keep a help option
    # without -h for the commands' reference)
    from click.testing import CliRunner

    from srcrawl.app.cli import cli

    out = CliRunner().invoke(cli, ["bench", "loco", "--joint", "--long"])
    assert out.exit_code == 2 and "--joint and --long are two choices" in out.output
    args = ["bench", "loco", "--long", "--corpus", "gimp-en", "--corpus", "x"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 2 and "not a shipped corpus: x" in out.output
