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
    indexed_at REAL NULL
);
CREATE INDEX IF NOT EXISTS pages_host ON pages (host);
CREATE INDEX IF NOT EXISTS pages_indexed ON pages (indexed_at);

CREATE TABLE IF NOT EXISTS links (
    src INTEGER NOT NULL,
    dst INTEGER NOT NULL,
    PRIMARY KEY (src, dst)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_dst ON links (dst);

CREATE TABLE IF NOT EXISTS terms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    term TEXT NOT NULL UNIQUE,
    df INTEGER NOT NULL DEFAULT 0
);

-- dl: the page's length, repeated so that BM25 reads one posting range and
-- never joins doclens. No index on fp: a page's postings are found through
-- doclens.terms, and an fp index would make every merge several times slower
-- (its inserts land all over the tree).
CREATE TABLE IF NOT EXISTS postings (
    term_id INTEGER NOT NULL,
    fp INTEGER NOT NULL,
    tf INTEGER NOT NULL,
    dl INTEGER NOT NULL DEFAULT 0,
    positions BLOB NULL,
    PRIMARY KEY (term_id, fp)
) WITHOUT ROWID;
DROP INDEX IF EXISTS postings_fp;

-- terms: the ids of the page's distinct terms, packed little-endian uint32
-- (the forward index, to replace its postings when it is indexed again)
CREATE TABLE IF NOT EXISTS doclens (
    fp INTEGER NOT NULL PRIMARY KEY,
    length INTEGER NOT NULL,
    terms BLOB NULL
);
-- covers COUNT(*) and SUM(length) without reading the term lists
CREATE INDEX IF NOT EXISTS doclens_length ON doclens (length);

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
