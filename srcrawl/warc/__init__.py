"""Every fetch kept in WARC/1.1 files; the store keeps where each response record is.

A crawl slave writes, per page, a ``request``, a ``response`` (or, when the
store already holds the same body, a ``revisit``) and, right after the response,
a ``conversion`` record holding the extracted text, each its own gzip member, so
that a page's body is one seek and one read of ``warc_length`` bytes at
``warc_offset``, and its text one read of ``text_length`` bytes after that (what
the index and the snippets read, :class:`~srcrawl.warc.read.WarcTexts`).

A recrawl that finds a page unchanged is kept too, as its ``request`` and a
``revisit`` in place of the response, naming the stored page's response record
(WARC-Refers-To, -Target-URI and -Date): a 304 Not Modified gets the
``server-not-modified`` profile (WARC/1.1 section 6.7.3; its block is the 304's
head, and it has no payload digest), a 200 with the stored body the
``identical-payload-digest`` one (:func:`~srcrawl.warc.records.revisit_record`).
A 200 whose text is the stored one but whose body is not (markup only changed)
is written whole, and the page's row points at it (see
:mod:`srcrawl.slave.page_writer`). This package writes them as plain bytes
gzipped by ISA-L (python-isal), FastWARC reads them, and warcio checks them in
the tests.

The parse threads build each page's records (:func:`~srcrawl.warc.records.prepare_fetch`); the
page writer appends a batch to the open file and makes it durable (flush and
fsync) *before* the store row that points into it is written, so a slave
killed mid-file loses no acknowledged page and leaves no pointer to a record
that cannot be read. Bodies are recorded as the crawl saw them: decoded, so
the stored head drops Content-Encoding and Transfer-Encoding and gives the
decoded Content-Length (the original encoding is kept in
``X-Srcrawl-Content-Encoding``).

Files live behind :class:`~srcrawl.warc.storage.WarcStorage`: a local or shared
directory, or an S3 object store (:mod:`~srcrawl.warc.objects`: a file is spooled
locally and published whole as one object when closed, and no row points into
it before). Each writer names its own files (job, host and process of the slave,
start time, serial) and creates them exclusively, so no two writers share one.

One package writes, reads and checks the files, below both the store (``sql/``, which
reads page texts) and the slaves (which write the records, and import archives):
:mod:`~srcrawl.warc.storage` (where files live, where a record is),
:mod:`~srcrawl.warc.objects` (files as objects of an S3 store),
:mod:`~srcrawl.warc.records` (the records of a fetch), :mod:`~srcrawl.warc.output` (a
writer's files), :mod:`~srcrawl.warc.read` (bodies, texts, archives read back) and
:mod:`~srcrawl.warc.check` (torn records found and cut).
"""
