"""Which requests a crawl may send: in its scope, and to an address it is allowed to reach.

Every request of a crawl slave (pages, robots.txt, sitemaps and each of
their redirects) passes two checks, both made by :class:`FetchPolicy`:

- before it is sent, its URL's host must be in the crawl's scope (the
  seeds' hosts and ``--allow-domain``, as the master judges links);
- when libcurl opens a socket for it, the address it is about to connect
  to must be allowed. The check runs on the address itself, after DNS and
  for every connection, so a name that resolves (or is rebound) to a
  private address gains nothing; a kept-alive connection is only reused
  for the origin it was opened, and checked, for.

By default only globally reachable unicast addresses are allowed: loopback,
private (RFC 1918, unique-local fc00::/7), link-local (169.254.0.0/16 and
fe80::/10, where cloud metadata services answer), multicast, unspecified,
reserved and the other special-purpose addresses are refused unless the
crawl allows them (``--allow-private``: every address; ``--allow-network
CIDR``: the addresses of those networks). One exception: a seed whose host
is an IP literal or ``localhost`` names its own origin (``scheme://host:port``
exactly), and that origin is allowed without the opt-in.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from srcrawl.core.urls import InvalidURL, canonicalize, host_of, origin
from srcrawl.queues.crawl_strategy import CrawlStrategy
from srcrawl.queues.scope import Scope

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """The networks ``cidrs`` name (``10.0.0.0/8``, ``fd00::/8``, an address alone).

    Raises ValueError naming the first one that is no network.
    """
    out = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError as e:
            raise ValueError(f"{cidr!r} is no network (CIDR such as 10.0.0.0/8): {e}") from e
    return tuple(out)


def is_public(address: Address) -> bool:
    """Whether ``address`` is a globally reachable unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d connects to a.b.c.d
            return is_public(address.ipv4_mapped)
        if address.is_site_local:
            return False
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_link_local
    )


def _literal(host: str) -> Address | None:
    """The address of an IP-literal host (``127.0.0.1``, ``[::1]``), else None."""
    try:
        return ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        return None


class FetchPolicy:
    """The one gate every request of a crawl slave passes (see the module docstring).

    ``scope``: the crawl's scope (None: any host). ``allow_private``: every
    address is allowed. ``networks``: addresses of these networks are
    allowed. ``seed_origins``: origins of the seeds (canonical
    ``scheme://host[:port]``); those whose host is an IP literal or
    ``localhost`` are allowed whatever their address. ``resolve``: names
    pinned to addresses before DNS, in curl's ``--resolve`` form
    (``host:port:address``); their addresses are checked like DNS answers.
    """

    def __init__(
        self,
        scope: Scope | None = None,
        *,
        allow_private: bool = False,
        networks: Iterable[str] = (),
        seed_origins: Iterable[str] = (),
        resolve: Sequence[str] = (),
    ) -> None:
        self.scope = scope
        self.allow_private = allow_private
        self.networks = parse_networks(networks)
        self.resolve = list(resolve)
        self.trusted: frozenset[str] = frozenset(
            o for o in seed_origins if _is_named_by_seed(host_of(o + "/"))
        )

    @classmethod
    def of(cls, strategy: CrawlStrategy) -> FetchPolicy:
        """The policy of a crawl's strategy document."""
        return cls(
            Scope(strategy),
            allow_private=strategy.allow_private,
            networks=strategy.allow_networks,
            seed_origins=strategy.seed_origins,
        )

    def refuse_url(self, url: str) -> str | None:
        """Why ``url`` must not be requested (its host is out of scope), else None."""
        if self.scope is None:
            return None
        try:
            host = host_of(canonicalize(url))
        except InvalidURL as e:
            return str(e)
        if not self.scope.host_in_scope(host):
            return f"{host} is not in the crawl's scope"
        return None

    def seed_host(self, url: str) -> str | None:
        """The host of ``url`` if it is on a seed's own IP-literal or ``localhost`` origin."""
        if not self.trusted:
            return None
        try:
            site = origin(canonicalize(url))
        except InvalidURL:
            return None
        return _name(host_of(site + "/")) if site in self.trusted else None

    def refuse_address(self, address: str, seed_host: str | None = None) -> str | None:
        """Why a connection to ``address`` must not be made, else None.

        ``seed_host``: the request is for a seed's own origin (:meth:`seed_host`):
        its IP literal, or loopback for ``localhost``, needs no opt-in.
        """
        if self.allow_private:
            return None
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])  # no zone index
        except ValueError:
            return f"{address!r} is no IP address"
        if is_public(ip) or any(ip in net for net in self.networks):
            return None
        if seed_host is not None and (
            ip.is_loopback if seed_host == "localhost" else ip == _literal(seed_host)
        ):
            return None
        return (
            f"address {ip} is not public (loopback, private, link-local or reserved): "
            "allow it with --allow-private or --allow-network"
        )

    def refuse_seed(self, url: str) -> str | None:
        """Why every request for the seed ``url`` would be refused at its address, else None:
        what `srcrawl seed` tells the user at once instead of a fetch failing later.

        The host is resolved as the fetch resolves it (a name pinned in ``resolve``
        first, else the system's resolver) and each address judged by
        :meth:`refuse_address`, as the fetch's socket check judges it; refused only
        when every address is (the fetch tries them in turn). A name that does not
        resolve here is no refusal: its fetch fails and says why.
        """
        if self.allow_private:
            return None
        try:
            parts = urlsplit(canonicalize(url))
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except (InvalidURL, ValueError) as e:
            return str(e)
        name = parts.hostname or ""
        addresses = _addresses(name, port, self.resolve)
        seed_host = self.seed_host(url)
        reasons = [self.refuse_address(a, seed_host) for a in addresses]
        if not reasons or not all(reasons):
            return None
        shown = ", ".join(addresses)
        return f"{name} resolves to {shown}: {reasons[0]}"


def _addresses(name: str, port: int, resolve: Sequence[str]) -> list[str]:
    """The addresses a fetch of ``name:port`` connects to: pinned ones, else the resolver's."""
    literal = _literal(name)
    if literal is not None:
        return [str(literal)]
    pinned = [
        entry.split(":", 2)[2].strip("[]")
        for entry in resolve
        if entry.count(":") >= 2 and entry.split(":", 2)[:2] == [name, str(port)]
    ]
    if pinned:
        return pinned
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _name(host: str) -> str:
    """The name or IP literal of a canonical ``host[:port]``."""
    return host if host.endswith("]") else host.rsplit(":", 1)[0]


def _is_named_by_seed(host: str) -> bool:
    """Whether a seed with ``host[:port]`` names its address itself (IP literal, localhost)."""
    name = _name(host)
    return name == "localhost" or _literal(name) is not None


def refuse_seed(strategy: CrawlStrategy, url: str) -> str | None:
    """Why the crawl of ``strategy`` would refuse every request for the seed ``url``, else
    None: the judge `srcrawl seed` and the portal's ``POST /api/seeds`` both apply."""
    return FetchPolicy.of(strategy).refuse_seed(url)
