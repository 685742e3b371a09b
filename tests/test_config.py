"""Configuration: one object from options and SRCRAWL_*; one clear line on failure."""

from __future__ import annotations

import pytest

from srcrawl.core.errors import ConfigError
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.sql.migrations import SCHEMA_VERSION


def test_embedded_defaults_with_nothing_configured(tmp_path) -> None:
    cfg = Config.load(env={}, home=tmp_path)
    assert cfg.embedded
    assert cfg.db == DatabaseURL(kind="sqlite", path=str(tmp_path / "srcrawl.db"), create_dirs=True)
    assert cfg.job == "default"


def test_options_override_environment() -> None:
    env = {
        "SRCRAWL_REDIS_URL": "redis://a:1/0",
        "SRCRAWL_JOB": "envjob",
        "SRCRAWL_DB_URL": "sqlite:///env.db",
    }
    cfg = Config.load(env=env, job="optjob", redis_url="redis://b:2/0")
    assert (cfg.redis_url, cfg.job, cfg.db.path) == ("redis://b:2/0", "optjob", "env.db")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///rel/x.db", DatabaseURL(kind="sqlite", path="rel/x.db")),
        ("sqlite:////abs/x.db", DatabaseURL(kind="sqlite", path="/abs/x.db")),
        (
            "mysql://u:p%40ss@db.example:3307/crawl",
            DatabaseURL(
                kind="mysql",
                host="db.example",
                port=3307,
                user="u",
                password="p@ss",
                database="crawl",
            ),
        ),
        ("mysql+pymysql://root@127.0.0.1/test", DatabaseURL(kind="mysql", database="test")),
    ],
)
def test_database_urls(url: str, expected: DatabaseURL) -> None:
    assert DatabaseURL.parse(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "foo://x",
        "sqlite://",
        "sqlite://host/x.db",
        "mysql://127.0.0.1",
        "mysql://h:notaport/db",
        "mysql:///db",
        "",
        "postgres://h/db",
    ],
)
def test_malformed_database_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="SRCRAWL_DB_URL is malformed"):
        DatabaseURL.parse(url) if url == "" else Config.load(env={"SRCRAWL_DB_URL": url})


@pytest.mark.parametrize("url", ["http://x", "redis://", "redis://h:port/0", "nonsense"])
def test_malformed_redis_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="SRCRAWL_REDIS_URL is malformed"):
        Config.load(env={"SRCRAWL_REDIS_URL": url})


@pytest.mark.parametrize("job", ["a b", "x{y}", "", "j" * 65, "a:b"])
def test_malformed_job_names(job: str) -> None:
    if job == "":
        assert Config.load(env={"SRCRAWL_JOB": job}).job == "default"
        return
    with pytest.raises(ConfigError, match="SRCRAWL_JOB is malformed"):
        Config.load(env={"SRCRAWL_JOB": job})


def test_unreachable_redis_is_a_config_error() -> None:
    cfg = Config.load(env={"SRCRAWL_REDIS_URL": "redis://127.0.0.1:1/0"})
    with pytest.raises(ConfigError, match="cannot reach Redis"):
        cfg.check()


def test_check_connects_both(redis_url, tmp_path) -> None:
    cfg = Config.load(
        env={"SRCRAWL_REDIS_URL": redis_url, "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db"}
    )
    cfg.check()
    assert cfg.store().schema_version() == SCHEMA_VERSION
    env = cfg.child_env()
    assert Config.load(env=env).db.path == str(tmp_path / "s.db")
    cfg.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
        ("redis://alice:pw@h:1/0", "redis://alice:***@h:1/0"),
        ("redis://alice@h:1/0", "redis://alice@h:1/0"),
        ("redis://h:1/0", "redis://h:1/0"),
        (
            "rediss://:a/b@c?d@h:1/0?ssl_ca_certs=/ca.pem",
            "rediss://:***@h:1/0?ssl_ca_certs=/ca.pem",
        ),
        ("rediss://h/0?ssl_password=pw&x=1", "rediss://h/0?ssl_password=***&x=1"),
        ("mysql://u:p%40ss@db:3307/crawl?ssl_ca=/c", "mysql://u:***@db:3307/crawl?ssl_ca=/c"),
        ("not a url", "not a url"),
    ],
)
def test_redacted_urls_hide_the_password(url: str, shown: str) -> None:
    from srcrawl.core.credentials import redact_url

    assert redact_url(url) == shown


def test_a_malformed_url_is_reported_without_its_password() -> None:
    for env in (
        {"SRCRAWL_REDIS_URL": "redis://:pa/ss@h:6379/0"},
        {"SRCRAWL_DB_URL": "mysql://u:pa/ss@h:6379/db"},
    ):
        with pytest.raises(ConfigError, match="is malformed") as e:
            Config.load(env=env)
        assert "pa/ss" not in str(e.value) and "ss@h" not in str(e.value)
        assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_mysql_url_with_tls_round_trips_and_hides_its_password(tmp_path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    db = DatabaseURL.parse(f"mysql://u:p%2Fw@db:3307/crawl?ssl_ca={ca}")
    assert (db.password, db.ssl_mode, db.ssl_ca) == ("p/w", "verify_identity", str(ca))
    assert DatabaseURL.parse(db.url()) == db
    assert db.redacted() == f"mysql://u@db:3307/crawl?ssl_mode=verify_identity&ssl_ca={ca}"
    assert "p/w" not in repr(db) and "p%2Fw" not in repr(db)
    cfg = Config.load(env={"SRCRAWL_REDIS_URL": "redis://:p%2Fw@h:1/0"})
    assert "p%2Fw" not in repr(cfg)
    assert DatabaseURL.parse("mysql://u@db/c?ssl_mode=preferred").ssl_mode == ""


def test_children_find_the_default_store_where_its_directories_may_be_created(tmp_path) -> None:
    cfg = Config.load(env={"SRCRAWL_REDIS_URL": "redis://127.0.0.1:1/0"}, home=tmp_path / "h")
    child = Config.load(env=cfg.child_env())
    assert child.db.path == str((tmp_path / "h" / "srcrawl.db").resolve())
    assert (tmp_path / "h").is_dir()  # the child may not create it: its path is a named one
    # (a Redis URL of its own: without one, child_env() starts the embedded Redis in ./.srcrawl)
    named = Config.load(
        env={
            "SRCRAWL_REDIS_URL": "redis://127.0.0.1:1/0",
            "SRCRAWL_DB_URL": f"sqlite:///{tmp_path}/s.db",
        },
        home=tmp_path / "n",
    )
    assert not Config.load(env=named.child_env()).db.create_dirs


def test_an_s3_warc_location_is_an_object_store_and_reaches_children(tmp_path) -> None:
    from srcrawl.warc.objects import ObjectWarcStorage
    from srcrawl.warc.storage import LocalWarcStorage

    env = {"SRCRAWL_HOME": str(tmp_path), "SRCRAWL_WARC_DIR": "s3://crawl-warc/eu/one/"}
    cfg = Config.load(env=env)
    assert cfg.warc_url == "s3://crawl-warc/eu/one" and cfg.warc_dir is None
    storage = cfg.warc_storage()
    assert isinstance(storage, ObjectWarcStorage) and storage is cfg.warc_source
    assert (storage.bucket, storage.prefix) == ("crawl-warc", "eu/one")
    assert storage.spool == cfg.warc_volume == tmp_path / "warc-spool"
    assert storage.max_file_age == 5.0
    assert cfg.child_env()["SRCRAWL_WARC_DIR"] == "s3://crawl-warc/eu/one"
    aged = Config.load(env={**env, "SRCRAWL_WARC_PUBLISH_AGE": "0.5"})
    assert aged.warc_storage().max_file_age == 0.5
    local = Config.load(env={"SRCRAWL_HOME": str(tmp_path)})
    assert local.warc_url is None and isinstance(local.warc_storage(), LocalWarcStorage)
    assert local.warc_source == local.warc_volume == tmp_path / "warc"
    for bad in ({"SRCRAWL_WARC_DIR": "s3://Bad_Bucket/x"}, {"SRCRAWL_WARC_PUBLISH_AGE": "-1"}):
        with pytest.raises(ConfigError):
            Config.load(env={**env, **bad})
