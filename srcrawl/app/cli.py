"""The ``srcrawl`` command line."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any, NoReturn

import click

from srcrawl import __version__
from srcrawl.app.cli_options import fetches_option
from srcrawl.app.local import end_children
from srcrawl.core.defaults import DEFAULT_FETCH_THREADS, DEFAULT_HEARTBEAT_TTL
from srcrawl.core.errors import SrcrawlError
from srcrawl.core.signals import Interrupted, die_with_parent, interrupts
from srcrawl.settings.config import Config

EXIT_USAGE = 2


def fail(message: str) -> NoReturn:
    """One clear line on stderr, exit code 2: how every expected failure ends."""
    click.echo(f"srcrawl: {message}", err=True)
    sys.exit(EXIT_USAGE)


class LazyGroup(click.Group):
    """A group whose commands named in ``lazy`` ("module:attribute") are imported only
    when they are run or listed: ``srcrawl search`` does not import the crawl, the
    benchmarks or the test web."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


class SrcrawlGroup(LazyGroup):
    """Turns every SrcrawlError raised by a command into one line and exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        # a child of a local run leaves with it; every command stops its children on a signal
        die_with_parent()
        try:
            with interrupts():
                return super().invoke(ctx)
        except SrcrawlError as e:
            fail(str(e))
        except click.BadParameter as e:  # out of range, not a number: as one line too
            fail(e.format_message())
        except Interrupted as e:
            sys.exit(e.exit_code)
        finally:
            end_children()
            cfg = ctx.obj
            if isinstance(cfg, Config):
                cfg.close()


def config_of(ctx: click.Context) -> Config:
    return ctx.find_root().obj


# The commands of the phases, the benchmarks and the test web: imported when used.
LAZY_COMMANDS = {
    "master": "srcrawl.master.commands:master_group",
    "crawl": "srcrawl.master.commands:crawl_command",
    "seed": "srcrawl.master.commands:seed_command",
    "index": "srcrawl.indexer.commands:index_command",
    "search": "srcrawl.indexer.commands:search_command",
    "pagerank": "srcrawl.pagerank.commands:pagerank_command",
    "bench": "srcrawl.benchmarks.commands:bench",
    "testweb": "srcrawl.testweb.commands:testweb",
    "import": "srcrawl.slave.commands:import_group",
}
LAZY_EXPORTS = {
    "pages": "srcrawl.master.commands:export_pages",
    "links": "srcrawl.master.commands:export_links",
    "ranks": "srcrawl.pagerank.commands:export_ranks",
    "warc": "srcrawl.slave.commands:export_warc",
}


@click.group(
    cls=SrcrawlGroup,
    lazy=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="srcrawl")
@click.option(
    "--redis-url",
    default=None,
    help="Redis URL [env SRCRAWL_REDIS_URL or _FILE; default: embedded]; "
    "a password here shows in the process list",
)
@click.option(
    "--db-url",
    default=None,
    help="sqlite:///path or mysql://user:pw@host/db [env SRCRAWL_DB_URL or _FILE]",
)
@click.option("--job", default=None, help="Job name [env SRCRAWL_JOB; default: default]")
@click.option(
    "--home",
    default=None,
    help="Directory of the embedded Redis and SQLite [env SRCRAWL_HOME; default: .srcrawl]",
)
@click.pass_context
def cli(
    ctx: click.Context, redis_url: str | None, db_url: str | None, job: str | None, home: str | None
) -> None:
    """srcrawl: crawl, store, index, rank and search, over Redis."""
    try:
        ctx.obj = Config.load(redis_url=redis_url, db_url=db_url, job=job, home=home)
    except SrcrawlError as e:
        if ctx.invoked_subcommand == "health":  # a healthcheck's answer is 0 or 1, never 2
            _unhealthy(str(e))
        fail(str(e))


@cli.group("export", cls=LazyGroup, lazy=LAZY_EXPORTS)
def export() -> None:
    """Print what the store holds."""


@cli.group()
def db() -> None:
    """The SQL store."""


@db.command("init")
@click.pass_context
def db_init(ctx: click.Context) -> None:
    """Create the schema (idempotent)."""
    cfg = config_of(ctx)
    store = cfg.store()
    store.init_schema()
    click.echo(f"schema {store.schema_version()} ready in {cfg.db.redacted()}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Queue lengths per phase, live workers and counters of the job."""
    from srcrawl.app import status as job_status

    cfg = config_of(ctx)
    client = cfg.redis()
    store = cfg.store()
    snapshot = job_status.collect(client, cfg.keys)
    snapshot["store"] = {
        "db": cfg.db.redacted(),
        "pages": store.count("pages"),
        "links": store.count("links"),
        "size_bytes": store.size_bytes(),
    }
    if as_json:
        click.echo(json.dumps(snapshot, indent=2, sort_keys=True))
    else:
        click.echo(job_status.render(snapshot))
        s = snapshot["store"]
        click.echo(
            f"store: {s['db']}  pages {s['pages']}  links {s['links']}  "
            f"size {_megabytes(s['size_bytes'])}"
        )


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{size / 2**10:.0f} KB"


@cli.command()
@click.pass_context
def down(ctx: click.Context) -> None:
    """Stop the embedded Redis server of this directory (its data stays)."""
    from srcrawl.core import embedded

    cfg = config_of(ctx)
    if not cfg.embedded:
        fail("SRCRAWL_REDIS_URL is set: srcrawl only stops the embedded Redis it started")
    if embedded.stop(cfg.home):
        click.echo(f"embedded Redis in {cfg.home} stopped; its data stays there")
    else:
        click.echo(f"no embedded Redis running in {cfg.home}")


@cli.group()
def slave() -> None:
    """A slave process (what each docker compose slave container runs)."""


@slave.command("start")
@click.option(
    "--phases",
    default="crawl,index,pagerank",
    show_default=True,
    help="Comma-separated phases this slave serves.",
)
@fetches_option(DEFAULT_FETCH_THREADS, "Fetches in flight at once, one thread drives them (crawl).")
@click.option(
    "--parser",
    type=click.Choice(["lxml", "bs4", "lexbor"]),
    default="lxml",
    show_default=True,
    help="HTML parser: the lxml fast path, BeautifulSoup, or lexbor (selectolax).",
)
@click.option("--burst", is_flag=True, help="Exit once the queues are drained.")
@click.option(
    "--heartbeat-ttl",
    default=DEFAULT_HEARTBEAT_TTL,
    show_default=True,
    type=click.FloatRange(0, min_open=True),
    help="Seconds of silence after which this slave's tasks go to another slave.",
)
@click.pass_context
def slave_start(
    ctx: click.Context, phases: str, fetches: int, parser: str, burst: bool, heartbeat_ttl: float
) -> None:
    """Serve srq tasks of the given phases until stopped (SIGTERM finishes the batch)."""
    from srcrawl.app.child import serve
    from srcrawl.app.phases import parse_phases
    from srcrawl.app.roles import SlaveRole

    cfg = config_of(ctx)
    cfg.check()
    role = SlaveRole(
        phases=tuple(parse_phases(phases)),
        threads=fetches,
        parser=parser,
        burst=burst,
        heartbeat_ttl=heartbeat_ttl,
    )
    serve(cfg, role, announce=lambda line: click.echo(line, err=True))


@cli.command()
@click.option(
    "--slaves", default=4, show_default=True, type=click.IntRange(1), help="Crawl slaves."
)
@click.option(
    "--serve/--no-serve",
    "serve_portal",
    default=None,
    help="End by serving the search portal until Ctrl-C [default: when the output is a terminal].",
)
@click.pass_context
def demo(ctx: click.Context, slaves: int, serve_portal: bool | None) -> None:
    """Serve a synthetic web on loopback; crawl, index, rank and search it; serve the portal."""
    from srcrawl.app.demo import run_demo

    cfg = config_of(ctx)
    cfg.check()
    if serve_portal is None:
        serve_portal = sys.stdout.isatty()
    run_demo(cfg, slaves=slaves, echo=click.echo, serve=serve_portal)


@cli.command()
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface).",
)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--threads",
    default=None,
    type=click.IntRange(0, 64),
    help="Searches that run at once in each server process (0: each in the process's "
    "event loop, with no hand-off to a thread; a long search then holds up the "
    "process's other requests) [default: 0 with a SQLite store, 4 with MySQL].",
)
@click.option(
    "--workers",
    default=None,
    type=click.IntRange(1, 64),
    help="Server processes, each with its own search threads [default: one a core, at most 8].",
)
@click.option("--user-dict", default=None, help="A jieba user dictionary for the queries.")
@click.pass_context
def serve(
    ctx: click.Context,
    bind: str,
    port: int,
    threads: int | None,
    workers: int | None,
    user_dict: str | None,
) -> None:
    """Serve the search portal, its JSON API, the status page and /metrics."""
    from srcrawl.portal import server

    cfg = config_of(ctx)
    cfg.check()
    workers = workers or server.default_workers()
    if workers > 1:
        server.serve_workers(
            cfg, workers, bind, port, threads=threads, user_dict=user_dict, announce=click.echo
        )
        return
    portal = server.build_portal(cfg, threads=threads, user_dict=user_dict)
    server.serve(portal, bind, port, announce=click.echo)


@cli.command()
@click.argument("role", type=click.Choice(["slave", "master", "indexer", "ranker", "portal"]))
@click.option(
    "--url",
    default="http://127.0.0.1:8080/healthz",
    show_default=True,
    help="The portal's /healthz (role portal).",
)
@click.pass_context
def health(ctx: click.Context, role: str, url: str) -> None:
    """Exit 0 when the ROLE service of this host (container) is doing its job, else exit 1
    with one line saying why not: a container's healthcheck."""
    from srcrawl.app.health import Unhealthy, check

    try:
        line = check(config_of(ctx), role, url=url)
    except Unhealthy as e:
        _unhealthy(str(e))
    click.echo(f"healthy: {line}")


def _unhealthy(reason: str) -> NoReturn:
    click.echo(f"unhealthy: {reason}", err=True)
    sys.exit(1)


def main() -> None:
    cli(prog_name="srcrawl")


if __name__ == "__main__":
    main()
