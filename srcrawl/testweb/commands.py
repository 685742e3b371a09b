"""``srcrawl testweb …``: serve the synthetic web, print its graph, measure the server."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click

from srcrawl.core.defaults import (
    DEFAULT_TESTWEB_CRAWL_DELAY,
    DEFAULT_TESTWEB_HOSTS,
    DEFAULT_TESTWEB_LARGE_BYTES,
    DEFAULT_TESTWEB_PAGES,
    DEFAULT_TESTWEB_PORT_BASE,
    DEFAULT_TESTWEB_ROBOTS_FAILURES,
    DEFAULT_TESTWEB_SEED,
    DEFAULT_TESTWEB_SLOW_SECONDS,
    DEFAULT_TESTWEB_TRAP_STEPS,
)


def _layout_options() -> list[Callable]:
    """How many hosts and pages, drawn from which seed, at which addresses."""
    return [
        click.option(
            "--hosts",
            type=click.IntRange(1),
            default=DEFAULT_TESTWEB_HOSTS,
            show_default=True,
            help="Hosts (distinct loopback origins).",
        ),
        click.option(
            "--pages",
            type=click.IntRange(1),
            default=DEFAULT_TESTWEB_PAGES,
            show_default=True,
            help="Regular pages per host.",
        ),
        click.option(
            "--seed",
            type=int,
            default=DEFAULT_TESTWEB_SEED,
            show_default=True,
            help="Generator seed.",
        ),
        click.option(
            "--port-base",
            type=click.IntRange(1, 65535),
            default=DEFAULT_TESTWEB_PORT_BASE,
            show_default=True,
            help="Host i listens on 127.0.0.1:PORT_BASE+i (with --addresses: "
            "127.0.0.(i+2):PORT_BASE).",
        ),
        click.option(
            "--addresses",
            is_flag=True,
            help="One loopback address per host (127.0.0.2, …) instead of one port.",
        ),
    ]


def _behaviour_options() -> list[Callable]:
    """How the hosts behave (delays, failures, stalls, sizes), and the name they go by."""
    return [
        click.option(
            "--crawl-delay",
            type=click.FloatRange(0),
            default=DEFAULT_TESTWEB_CRAWL_DELAY,
            show_default=True,
            help="Crawl-delay (s) of the hosts that set one.",
        ),
        click.option(
            "--robots-failures",
            type=click.IntRange(0),
            default=DEFAULT_TESTWEB_ROBOTS_FAILURES,
            show_default=True,
            help="500 answers of the flaky host's robots.txt before it works.",
        ),
        click.option(
            "--slow-seconds",
            type=click.FloatRange(0),
            default=DEFAULT_TESTWEB_SLOW_SECONDS,
            show_default=True,
            help="How long the timeout pages stall.",
        ),
        click.option(
            "--large-bytes",
            type=click.IntRange(0),
            default=DEFAULT_TESTWEB_LARGE_BYTES,
            show_default=True,
            help="Size of the large page.",
        ),
        click.option(
            "--public-host",
            default=None,
            metavar="NAME",
            help="Host name of every URL of the web (links, seeds) instead of the "
            "loopback address, e.g. a compose service name; ports stay "
            "PORT_BASE+i.",
        ),
    ]


def generator_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options that decide the web (``serve`` and ``graph`` agree when they agree)."""
    options = [*_layout_options(), *_behaviour_options()]
    for option in reversed(options):
        f = option(f)
    return f


def _web(opts: dict[str, Any], address: str = "127.0.0.1"):
    from srcrawl.testweb.generator import generate

    return generate(
        opts["hosts"],
        opts["pages"],
        opts["seed"],
        port_base=opts["port_base"],
        addresses=opts["addresses"],
        crawl_delay=opts["crawl_delay"],
        robots_failures=opts["robots_failures"],
        slow_seconds=opts["slow_seconds"],
        large_bytes=opts["large_bytes"],
        host_name=opts["public_host"],
        address=address,
    )


def _generator_kwargs(f: Callable[..., Any]) -> Callable[..., Any]:
    names = (
        "hosts",
        "pages",
        "seed",
        "port_base",
        "addresses",
        "crawl_delay",
        "robots_failures",
        "slow_seconds",
        "large_bytes",
        "public_host",
    )

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        opts = {n: kwargs.pop(n) for n in names}
        return f(opts, **kwargs)

    return wrapper


def _is_loopback(address: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


@click.group()
def testweb() -> None:
    """A synthetic web on loopback, for tests, the demo and benchmarks."""


@testweb.command("serve")
@generator_options
@click.option(
    "--latency-ms",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Delay before every response.",
)
@click.option(
    "--access-log",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append one JSON line per request to this file.",
)
@click.option(
    "--bind",
    "bind_address",
    default=None,
    metavar="ADDR",
    help="Listen on ADDR (e.g. 0.0.0.0 in a container) at each host's port, "
    "instead of each host's loopback address; a loopback ADDR (::1 for "
    "IPv6) is also the address the web's URLs name.",
)
@_generator_kwargs
def serve(
    opts: dict[str, Any], latency_ms: float, access_log: str | None, bind_address: str | None
) -> None:
    """Print the seed URLs (one per host root), then serve until Ctrl-C."""
    import asyncio
    import signal

    from srcrawl.testweb.server import TestWebServer, bind_sockets

    if bind_address is not None and opts["addresses"]:
        raise click.UsageError("--bind listens on one address: use it with ports, not --addresses")
    if bind_address is not None and _is_loopback(bind_address) and not opts["public_host"]:
        web, bind_address = _web(opts, bind_address), None  # URLs name the address itself
    else:
        web = _web(opts)
    socks = bind_sockets(web, bind_address)
    server = TestWebServer(web, latency_ms=latency_ms, access_log=access_log)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await server.start(socks)
        click.echo("\n".join(web.seed_urls))
        sys.stdout.flush()
        click.echo(
            f"serving {len(web.hosts)} hosts, {len(web.pages)} pages; Ctrl-C stops", err=True
        )
        try:
            await stop.wait()
        finally:
            await server.stop()

    asyncio.run(main())


@testweb.command("graph")
@generator_options
@click.option(
    "--trap-steps",
    type=click.IntRange(0),
    default=DEFAULT_TESTWEB_TRAP_STEPS,
    show_default=True,
    help="Steps into each infinite trap.",
)
@click.option(
    "--attrs",
    is_flag=True,
    help="Add two columns: the link kind, and 'nofollow' (rel or meta) or '-'.",
)
@_generator_kwargs
def graph(opts: dict[str, Any], trap_steps: int, attrs: bool) -> None:
    """Print SOURCE<TAB>TARGET per edge (canonical URLs), the same URLs ``serve`` serves."""
    web = _web(opts)
    seen: set[tuple] = set()
    out = sys.stdout
    for src, dst, link in web.edges(trap_steps):
        row: tuple[str, ...] = (src, dst)
        if attrs:
            page = web.page(src)
            nofollow = link.nofollow or (page is not None and page.meta_nofollow)
            row = (src, dst, link.kind, "nofollow" if nofollow else "-")
        if row not in seen:
            seen.add(row)
            out.write("\t".join(row) + "\n")


@testweb.command("bench")
@click.option("--hosts", type=click.IntRange(1), default=DEFAULT_TESTWEB_HOSTS, show_default=True)
@click.option("--pages", type=click.IntRange(1), default=DEFAULT_TESTWEB_PAGES, show_default=True)
@click.option("--seconds", type=click.FloatRange(0.1), default=5.0, show_default=True)
@click.option("--connections", type=click.IntRange(1), default=16, show_default=True)
@click.option("--latency-ms", type=click.FloatRange(0), default=0.0, show_default=True)
@click.option(
    "--access-log",
    type=click.Path(dir_okay=False),
    default=None,
    help="Let the server log every request to this file.",
)
def bench(
    hosts: int,
    pages: int,
    seconds: float,
    connections: int,
    latency_ms: float,
    access_log: str | None,
) -> None:
    """Requests/s of the server (its own process) under keep-alive load from this one."""
    import asyncio

    from srcrawl.testweb.loadgen import process_cpu_seconds, run_load
    from srcrawl.testweb.process import TestWeb

    with TestWeb.generate(
        hosts, pages, seed=DEFAULT_TESTWEB_SEED, latency_ms=latency_ms, access_log=access_log
    ) as tw:
        asyncio.run(run_load(tw.web, 0.5, connections))  # warm the render cache
        assert tw.server_pid is not None
        cpu0 = process_cpu_seconds(tw.server_pid)
        result = asyncio.run(run_load(tw.web, seconds, connections))
        cpu1 = process_cpu_seconds(tw.server_pid)
    click.echo(result.render())
    if cpu0 is not None and cpu1 is not None and result.requests:
        per_request = (cpu1 - cpu0) / result.requests
        click.echo(
            f"server CPU {per_request * 1e6:.0f} µs per request, "
            f"{(cpu1 - cpu0) / result.seconds:.0%} of one core busy: "
            f"≈ {1 / per_request:,.0f} requests/s per core of capacity"
        )
