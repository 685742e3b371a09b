"""The search portal: ``srcrawl serve``'s web app (search page, JSON API, status, metrics)."""
