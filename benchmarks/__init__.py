"""Throughput benchmarks of srcrawl (``srcrawl bench …``), apart from the product.

One module per thing measured: :mod:`.queue` (the queue protocol), :mod:`.parse`
(charset decoding and HTML parsing), :mod:`.master` (the crawl master's URL
path), :mod:`.crawl` (a whole crawl of the synthetic web, and :mod:`.scrapy_peer`
beside it), :mod:`.index` (the index phase and search), :mod:`.pagerank`
(PageRank iterations); :mod:`.scaling` is what the scaling series share, and
:mod:`.commands` their command line. Production code never imports this package.
"""
