"""Secrets in the configuration: URLs read from files, and URLs made fit to show.

A Redis or MySQL URL may carry a password. It may come from a file named by
``NAME_FILE`` (as container secrets are mounted), and whatever srcrawl shows
of a URL — errors, ``status``, logs — goes through :func:`redact_url` first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from srcrawl.core.errors import ConfigError

FILE_SUFFIX = "_FILE"
"""``NAME_FILE`` names a file holding the value of ``NAME``."""

HIDDEN = "***"

# any query parameter whose name mentions a password (ssl_password, password, …)
_SECRET_PARAM = re.compile(r"((?:^|[?&;])[^=&;#]*password[^=&;#]*=)[^&;#]*", re.IGNORECASE)


def read_setting(env: Mapping[str, str], name: str) -> tuple[str | None, Path | None]:
    """The value of ``name`` and the file it was read from, if ``NAME_FILE`` was given.

    The file holds the value on its first line; surrounding whitespace (the
    trailing newline editors add) is dropped. Both set, an unreadable file or
    an empty one is a ConfigError.
    """
    value = env.get(name) or None
    file_name = env.get(name + FILE_SUFFIX) or None
    if file_name is None:
        return value, None
    if value is not None:
        raise ConfigError(f"{name} and {name}{FILE_SUFFIX} are both set: set one of them")
    path = Path(file_name).absolute()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise ConfigError(f"{name}{FILE_SUFFIX}: cannot read {path}: {reason}") from None
    value = text.strip()
    if not value:
        raise ConfigError(f"{name}{FILE_SUFFIX}: {path} is empty")
    return value, path


def redact_url(url: str) -> str:
    """``url`` with its password (and any ``*password*`` query value) replaced by ``***``.

    It works on text, not on a parse, so a URL too malformed to parse (a
    password with an unescaped ``/`` or ``@``) is hidden too: everything up
    to the last ``@`` after the scheme is user information.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _SECRET_PARAM.sub(rf"\1{HIDDEN}", url)
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _ = rest[:at].partition(":")
        rest = f"{user}{':' + HIDDEN if colon else ''}@{rest[at + 1 :]}"
    return scheme + sep + _SECRET_PARAM.sub(rf"\1{HIDDEN}", rest)
