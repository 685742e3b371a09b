"""The exception tree: every error srcrawl raises on purpose derives from SrcrawlError."""


class SrcrawlError(Exception):
    """Base of every error srcrawl raises on purpose."""


class ConfigError(SrcrawlError):
    """A setting is malformed or a service it names cannot be reached."""


class StoreError(SrcrawlError):
    """The SQL store refused an operation."""


class StoreTransientError(StoreError):
    """The store failed a transaction for a reason that passes (a deadlock, a snapshot
    conflict, a lock wait timeout, a lost connection): run again whole, it may succeed."""


class StoreDataError(StoreError):
    """The store refused the data itself (a constraint, a value too long): trying the
    same rows again fails again, unlike a store that is down or busy."""


class EnvelopeError(SrcrawlError):
    """A queue message is not a srcrawl envelope this version understands."""


class EmbeddedRedisError(SrcrawlError):
    """The embedded Redis server could not be started or stopped."""


class LeaseHeld(SrcrawlError):
    """Another master holds the lease of this phase of the job."""


class CrawlRestarted(SrcrawlError):
    """The job's crawl was started anew with another shape while a master ran it."""


class LeaseLost(SrcrawlError):
    """This master's lease lapsed or was taken over: it may commit nothing more."""
