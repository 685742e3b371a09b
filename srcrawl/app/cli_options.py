"""Command-line options that several commands share (the command line's, not the library's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

_ALIAS_KEY = "srcrawl.fetches_alias"
_DEFAULTS = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _take_alias(ctx: click.Context) -> None:
    """--fetches, if it is set and came from its default, takes --threads's value."""
    alias = ctx.meta.get(_ALIAS_KEY)
    source = ctx.get_parameter_source("fetches")
    if alias is not None and "fetches" in ctx.params and source in _DEFAULTS:
        ctx.params["fetches"] = alias


class _FetchesOption(click.Option):
    # Decided once a parameter's value and source are both set (after its callback in
    # some click versions, before it in others), whichever of the two options is
    # processed first.
    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> Any:
        value, args = super().handle_parse_result(ctx, opts, args)
        _take_alias(ctx)
        return ctx.params.get(self.name, value), args


class _ThreadsAlias(click.Option):
    def handle_parse_result(self, ctx: click.Context, opts: Any, args: list[str]) -> Any:
        value, args = super().handle_parse_result(ctx, opts, args)
        if value is not None:
            ctx.meta[_ALIAS_KEY] = value
            _take_alias(ctx)
        return value, args


def fetches_option(default: int, help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--fetches N``: fetches a crawl slave keeps in flight at once, all driven by one
    thread. ``--threads N``, its former name, still works and is hidden from the help."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        alias = click.option(
            "--threads",
            type=click.IntRange(1),
            default=None,
            hidden=True,
            expose_value=False,
            cls=_ThreadsAlias,
        )
        option = click.option(
            "--fetches",
            "fetches",
            default=default,
            show_default=True,
            type=click.IntRange(1),
            help=help,
            cls=_FetchesOption,
        )
        return option(alias(f))

    return decorate


class DurationType(click.ParamType):
    """A click type for durations: ``90``, ``90s``, ``6h``, ``1d`` (srcrawl/app/durations.py)."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        from srcrawl.app.durations import parse_duration

        try:
            return parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = DurationType()


_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 2**10,
    "KB": 2**10,
    "M": 2**20,
    "MB": 2**20,
    "G": 2**30,
    "GB": 2**30,
    "T": 2**40,
    "TB": 2**40,
}


class ByteSizeType(click.ParamType):
    """A click type for sizes in bytes: ``1048576``, ``512M``, ``2G`` (powers of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper()
        number = text.rstrip("KMGTB")
        unit = text[len(number) :]
        try:
            size = float(number) * _SIZE_UNITS[unit]
        except (KeyError, ValueError):
            self.fail(f"{value!r} is no size (a number of bytes, or with K, M, G or T)", param, ctx)
        if size < 0:
            self.fail(f"{value!r} is negative", param, ctx)
        return int(size)


BYTE_SIZE = ByteSizeType()
