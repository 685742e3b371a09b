"""``python -m srcrawl.testweb``: the server process of :class:`srcrawl.testweb.TestWeb`."""

import sys

from srcrawl.testweb.process import child_main

sys.exit(child_main())
