-- srcrawl schema for MySQL / MariaDB (InnoDB, utf8mb4). Applied idempotently
-- by `srcrawl db init`. Rows are keyed by 64-bit URL fingerprints (signed).
-- utf8mb4_bin: terms and URLs compare byte for byte, never case-folded.

CREATE TABLE IF NOT EXISTS meta (
    k VARCHAR(64) NOT NULL PRIMARY KEY,
    v TEXT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS pages (
    fp BIGINT NOT NULL PRIMARY KEY,
    url TEXT NOT NULL,
    host VARCHAR(255) NOT NULL,
    depth INT NOT NULL DEFAULT 0,
    status INT NOT NULL DEFAULT 0,
    content_type VARCHAR(255) NOT NULL DEFAULT '',
    fetched_at DOUBLE NOT NULL,
    fetch_ms INT NOT NULL DEFAULT 0,
    title TEXT NOT NULL,
    text MEDIUMTEXT NOT NULL,
    body MEDIUMBLOB NULL,
    indexed_at DOUBLE NULL,
    -- why the fetch failed (timeout, truncated, …), NULL when it did not
    error VARCHAR(32) NULL,
    -- complete, capped (at --max-page-bytes), incomplete (cut off), none (no response)
    body_state VARCHAR(16) NOT NULL DEFAULT 'complete',
    -- the response record in a WARC file (warc_files.id; see sqlite.sql)
    warc_file_id BIGINT NULL,
    warc_offset BIGINT NULL,
    warc_length BIGINT NULL,
    payload_digest VARCHAR(64) NULL,
    text_length BIGINT NULL,
    -- recrawl (schema 6): see sqlite.sql
    etag VARCHAR(255) NULL,
    last_modified VARCHAR(255) NULL,
    digest BIGINT NULL,
    revisit DOUBLE NULL,
    next_fetch DOUBLE NULL,
    checked_at DOUBLE NULL,
    KEY pages_host (host),
    KEY pages_indexed (indexed_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The WARC files pages point into (schema 7; see sqlite.sql). A unique key on
-- name itself would exceed InnoDB's 3072 bytes (1024 utf8mb4 characters are up
-- to 4096; MySQL refuses it, MariaDB makes a hash key it never reads by), so
-- the key is on the name's SHA-1, which lookups give with the name.
CREATE TABLE IF NOT EXISTS warc_files (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(1024) NOT NULL,
    name_sha1 BINARY(20) AS (UNHEX(SHA1(name))) STORED,
    UNIQUE KEY warc_files_name (name_sha1)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- anchor: the text of the page's <a> elements pointing to dst (at most
-- 256 characters), NULL when they have none
CREATE TABLE IF NOT EXISTS links (
    src BIGINT NOT NULL,
    dst BIGINT NOT NULL,
    anchor VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (src, dst),
    KEY links_to (dst)
) ENGINE=InnoDB;
-- links_to: the index reads the anchor text pointing to the pages of each
-- batch (see sqlite.sql); the old links_dst is retired by step 5 of sql/migrations.py.

-- The search index is not in SQL: it is a Tantivy directory (indexer/engine.py);
-- pages.indexed_at says which pages it holds as of their last fetch.

CREATE TABLE IF NOT EXISTS ranks (
    fp BIGINT NOT NULL PRIMARY KEY,
    score DOUBLE NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS jobs (
    name VARCHAR(64) NOT NULL,
    phase VARCHAR(16) NOT NULL,
    state VARCHAR(16) NOT NULL,
    started_at DOUBLE NULL,
    finished_at DOUBLE NULL,
    stats TEXT NOT NULL,
    PRIMARY KEY (name, phase)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
