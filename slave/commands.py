"""``srcrawl export warc`` and ``srcrawl import warc``: the crawl's WARC files out, any
WARC file in."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import click

from srcrawl.core.errors import ConfigError
from srcrawl.settings.config import Config

if TYPE_CHECKING:
    from srcrawl.warc.storage import LocalWarcStorage


def _config(ctx: click.Context) -> Config:
    return ctx.find_root().obj


@click.command("warc")
@click.option(
    "--copy",
    "copy_to",
    type=click.Path(file_okay=False),
    default=None,
    help="Copy the files into this directory instead of listing them.",
)
@click.option(
    "--truncate-torn",
    is_flag=True,
    help="Cut a file that ends in a torn record (a slave killed mid-write) back to "
    "its last whole record.",
)
@click.pass_context
def export_warc(ctx: click.Context, copy_to: str | None, truncate_torn: bool) -> None:
    """The job's WARC files (in $SRCRAWL_WARC_DIR, default $SRCRAWL_HOME/warc), one path
    a line, and with --copy, copied.

    Each file is checked first: one that ends in a torn record is named on stderr and
    the command exits with status 1, unless --truncate-torn cut it back (no page of the
    store points past its last whole record). A file a running slave writes is left alone.
    """
    from srcrawl.warc.storage import LocalWarcStorage

    cfg = _config(ctx)
    if cfg.warc_url is not None:
        # objects are whole when published (no torn record to cut): listed by URL
        if copy_to is not None or truncate_torn:
            raise click.UsageError("--copy and --truncate-torn work on a WARC directory only")
        for name in cfg.warc_storage().names(cfg.job):
            click.echo(f"{cfg.warc_url}/{name}")
        return
    storage = LocalWarcStorage(cfg.warc_root)
    names = storage.names(cfg.job)
    torn = _check(storage, names, truncate_torn)
    if copy_to is not None:
        dest = Path(copy_to)
        dest.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy2(storage.path(name), dest / Path(name).name)
        click.echo(f"{len(names)} WARC file(s) of job {cfg.job} copied to {dest}", err=True)
    else:
        for name in names:
            click.echo(str(storage.path(name)))
    if torn:
        ctx.exit(1)


def _check(storage: LocalWarcStorage, names: list[str], truncate: bool) -> int:
    """Check each file for a torn tail (cut back with ``truncate``); how many stay torn."""
    from srcrawl.warc.check import check_file

    left = 0
    for name in names:
        found = check_file(storage.path(name), truncate=truncate)
        if found.in_use:
            click.echo(f"{found.path}: being written, not checked", err=True)
        elif found.truncated:
            click.echo(
                f"{found.path}: torn record cut off, {found.size - found.whole} bytes "
                f"after byte {found.whole}",
                err=True,
            )
        elif found.torn:
            left += 1
            click.echo(
                f"{found.path}: torn record after byte {found.whole} "
                f"({found.size - found.whole} bytes; --truncate-torn cuts them off)",
                err=True,
            )
    return left


@click.group("import")
def import_group() -> None:
    """Load pages from files other tools wrote."""


@import_group.command("warc")
@click.argument("files", nargs=-1, required=True)
@click.option("--parser", type=click.Choice(["lxml", "bs4"]), default="lxml", show_default=True)
@click.pass_context
def import_warc_command(ctx: click.Context, files: tuple[str, ...], parser: str) -> None:
    """Pages and links from WARC FILEs (any standard WARC, gzipped or not; a path, or an
    s3://BUCKET/KEY object), each page pointing into its file; `srcrawl index` then
    indexes them. The files must stay where they are: the store reads bodies from them."""
    import tempfile

    from srcrawl.core.object_store import is_object_url
    from srcrawl.slave.warc_import import import_warc
    from srcrawl.warc.objects import fetch_object

    for name in files:
        if not name.endswith((".warc", ".warc.gz")):
            raise ConfigError(f"{name}: not a WARC file (.warc or .warc.gz)")
        if not is_object_url(name) and not Path(name).is_file():
            raise ConfigError(f"{name}: no such file")
    store = _config(ctx).store()
    for name in files:
        if is_object_url(name):  # read whole from a copy; its pages point at the object
            with tempfile.TemporaryDirectory(prefix="srcrawl-import-") as tmp:
                counts = import_warc(store, fetch_object(name, Path(tmp)), parser=parser, name=name)
        else:
            counts = import_warc(store, Path(name), parser=parser)
        click.echo(
            f"{name}: {counts.pages} pages, {counts.links} links ({counts.skipped} records skipped)"
        )
