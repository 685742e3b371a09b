"""`srcrawl bench parse`."""

from __future__ import annotations

from pathlib import Path

import click

from srcrawl.benchmarks.commands.common import pages_option, rounds_option


@click.command("parse")
@pages_option(2000, "Pages for decoding and each fast parse path.")
@click.option(
    "--bs4-pages",
    default=100,
    show_default=True,
    type=click.IntRange(0),
    help="Pages for BeautifulSoup (0: skip it).",
)
@click.option(
    "--size-kb",
    default=30,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Size of the generated page.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Parse every *.html file under DIR instead of the generated page (lxml and lexbor "
    "taking turns; --pages, --bs4-pages and --size-kb do not apply).",
)
@rounds_option(3, "With --dir: times each parse path goes over all the pages.")
def bench_parse(
    pages: int, bs4_pages: int, size_kb: int, directory: Path | None, rounds: int
) -> None:
    """Pages/s of charset decoding and of each HTML parser, in this one process."""
    from srcrawl.benchmarks.parse import run_dir_benchmark, run_parse_benchmark

    if directory is not None:
        click.echo(run_dir_benchmark(directory, rounds=rounds).render())
        return
    click.echo(run_parse_benchmark(pages=pages, bs4_pages=bs4_pages, size_kb=size_kb).render())
