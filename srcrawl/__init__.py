"""srcrawl: a distributed crawler and search engine over Redis."""

__version__ = "0.1.0"
