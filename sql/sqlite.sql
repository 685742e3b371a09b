-- srcrawl schema for SQLite. Applied idempotently by `srcrawl db init`.
-- Rows are keyed by 64-bit URL fingerprints (signed, SQLite's INTEGER).

CREATE TABLE IF NOT EXISTS meta (
    k TEXT NOT NULL PRIMARY KEY,
    v TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS pages (
    fp INTEGER NOT NULL PRIMARY KEY,
    url TEXT NOT NULL,
    host TEXT NOT NULL,
    depth INTEGER NOT NULL DEFAULT 0,
    status INTEGER NOT NULL DEFAULT 0,
    content_type TEXT NOT NULL DEFAULT '',
    fetched_at REAL NOT NULL,
    fetch_ms INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    body BLOB NULL,
    indexed_at REAL NULL,
    -- why the fetch failed (timeout, truncated, …), NULL when it did not
    error TEXT NULL,
    -- complete, capped (at --max-page-bytes), incomplete (cut off), none (no response)
    body_state TEXT NOT NULL DEFAULT 'complete',
    -- the response record in a WARC file (warc_files.id: the file's name is kept
    -- once there, not on each of the thousands of rows pointing into it): one seek
    -- and one read give the body
    warc_file_id INTEGER NULL,
    warc_offset INTEGER NULL,
    warc_length INTEGER NULL,
    -- sha1:BASE32 of the body (WARC-Payload-Digest): a refetch with the same one is a revisit
    payload_digest TEXT NULL,
    -- the extracted text as a WARC conversion record right after the response record
    -- (at warc_offset + warc_length, this many bytes); NULL: the text is in `text`
    text_length INTEGER NULL,
    -- recrawl (schema 6): the response's validators for a conditional GET, a
    -- fingerprint of title and text (changed or not), the revisit interval (s)
    -- and the next fetch time (the live schedule is the crawl's in Redis), and
    -- when it was last fetched, a 304 included (fetched_at: the stored version's)
    etag TEXT NULL,
    last_modified TEXT NULL,
    digest INTEGER NULL,
    revisit REAL NULL,
    next_fetch REAL NULL,
    checked_at REAL NULL
);
CREATE INDEX IF NOT EXISTS pages_host ON pages (host);
CREATE INDEX IF NOT EXISTS pages_indexed ON pages (indexed_at);

-- The WARC files pages point into (schema 7), numbered: name is a file under
-- the WARC directory (job/….warc.gz), or the absolute path of an imported archive.
CREATE TABLE IF NOT EXISTS warc_files (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

-- anchor: the text of the page's <a> elements pointing to dst (at most
-- 256 characters), NULL when they have none
CREATE TABLE IF NOT EXISTS links (
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    anchor TEXT NULL,
    PRIMARY KEY (src, dst)
) WITHOUT ROWID;
-- The index reads the anchor text pointing to the pages of each batch, by
-- dst. The index on dst costs a random B-tree insert per stored link (it
-- was left out for that once); scanning the links table per index batch
-- instead costs a full read of it per batch. The old links_dst name is
-- retired by step 5 of sql/migrations.py, so this one has its own.
CREATE INDEX IF NOT EXISTS links_to ON links (dst);

-- The search index is not in SQL: it is a Tantivy directory (indexer/engine.py);
-- pages.indexed_at says which pages it holds as of their last fetch.

CREATE TABLE IF NOT EXISTS ranks (
    fp INTEGER NOT NULL PRIMARY KEY,
    score REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS jobs (
    name TEXT NOT NULL,
    phase TEXT NOT NULL,
    state TEXT NOT NULL,
    started_at REAL NULL,
    finished_at REAL NULL,
    stats TEXT NOT NULL,
    PRIMARY KEY (name, phase)
);
