"""Who is asking: the User-Agent every request of a crawl carries.

The agent names the crawler and how to reach its operator, e.g.
``mybot/1.0 (+https://example.org/bot)``, as site owners expect of a crawler
(Nutch and Heritrix refuse to run without one). Its product token, the name
before the first '/', is what robots.txt groups are matched against
(RFC 9309 §2.2.1): a robots.txt group must never match on a word of the
comment, such as the contact's domain.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from srcrawl.core.errors import ConfigError

ENV_USER_AGENT = "SRCRAWL_USER_AGENT"
"""The environment variable of ``--user-agent``."""

_TOKEN = re.compile(r"[A-Za-z_-]+")
"""RFC 9309's product token: letters, '-' and '_'."""

_CONTACT = re.compile(r"\+\s*https?:|https?://|mailto:|[^\s@()<>]+@[^\s@()<>]+\.[A-Za-z]{2,}")
"""A URL (``+http…``, ``http(s)://``) or an e-mail address."""

_LOOPBACK_NAMES = ("localhost", ".localhost")


def product_token(agent: str) -> str:
    """The crawler's name in ``agent``: what comes before the first '/' or space."""
    return re.split(r"[/\s]", agent.strip(), maxsplit=1)[0]


def check_user_agent(agent: str) -> str:
    """``agent`` if it can be sent and matched; a ConfigError naming what is wrong."""
    if not agent.strip():
        raise ConfigError("--user-agent must not be empty")
    if not agent.isprintable() or not agent.isascii():
        raise ConfigError("--user-agent must be printable ASCII (it is sent as a header)")
    if not _TOKEN.fullmatch(product_token(agent)):
        raise ConfigError(
            f"--user-agent {agent!r} must start with a name of letters, '-' and '_' that "
            "robots.txt can match (RFC 9309), e.g. 'mybot/1.0 (+https://example.org/bot)'"
        )
    return agent


def has_contact(agent: str) -> bool:
    """Whether ``agent`` says how to reach its operator (a URL or an e-mail address)."""
    return _CONTACT.search(agent) is not None


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (``name``, ``name:port``, ``[v6]:port`` or a domain) is this machine."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if name == "localhost" or name.endswith(_LOOPBACK_NAMES[1]):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def contact_warning(agent: str, hosts: Iterable[str]) -> str | None:
    """A one-line warning when a crawl reaches beyond this machine without a contact."""
    outside = [h for h in hosts if not is_loopback_host(h)]
    if not outside or has_contact(agent):
        return None
    return (
        f"warning: the User-Agent {agent!r} gives no contact, yet the crawl reaches "
        f"{outside[0]}{' and others' if len(outside) > 1 else ''}: name a URL or e-mail "
        "address with --user-agent (e.g. 'mybot/1.0 (+https://example.org/bot)')"
    )
