"""A synthetic web served on loopback, for tests, the demo and benchmarks.

- :func:`generate` builds the model (:class:`Web`): hosts, pages, links with
  their attributes, special pages at stable URLs (``Web.special``), planted
  search terms (``Web.known_items()``) and the exact expected crawl
  (``Web.expected_crawl()``).
- :class:`TestWeb` serves a model for the duration of a ``with`` block;
  ``srcrawl testweb serve`` serves one from the command line.
"""

from srcrawl.testweb.accesslog import read_access_log
from srcrawl.testweb.generator import generate
from srcrawl.testweb.model import LINK_KINDS, Host, Link, Page, TestWebError, Web
from srcrawl.testweb.process import TestWeb
from srcrawl.testweb.server import TestWebServer
from srcrawl.testweb.urls import canonical

__all__ = [
    "LINK_KINDS",
    "Host",
    "Link",
    "Page",
    "TestWeb",
    "TestWebError",
    "TestWebServer",
    "Web",
    "canonical",
    "generate",
    "read_access_log",
]
