"""The one configuration object (:class:`~srcrawl.settings.config.Config`), built once
from options and ``SRCRAWL_*`` variables; it opens the Redis client and the store, so it
sits above the store (``sql/``) and below the roles that take it at their edges."""
