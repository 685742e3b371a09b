#!/usr/bin/env python3
"""The portal's screenshots in the docs (docs/img/portal-*.png), taken from the demo.

Runs ``srcrawl demo --no-serve`` in a home of its own (a synthetic web on loopback,
crawled, indexed and ranked; its embedded Redis stopped after), serves the portal
on the demo's store, and photographs it in Debian's Chromium driven by Playwright:
results in light and dark mode, a phone's width, a stored copy, the search box's
completions open, and the admin area's page of the demo's job. Each picture is 1000
px wide (390 on the phone) and cut to MAX_HEIGHT, so the PNGs stay small. Chinese
needs a CJK font in the system (Debian: fonts-wqy-zenhei or fonts-noto-cjk), else it
shows as boxes.

    .venv/bin/python scripts/portal_screenshots.py [--out docs/img] [--query WORD]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import urlencode

import requests

from srcrawl.app.demo import demo_config
from srcrawl.portal.admin_auth import AdminPassword
from srcrawl.portal.server import build_portal, serving_in_thread
from srcrawl.settings.config import Config

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-sync", "--no-first-run"]
WIDTH, PHONE_WIDTH = 1000, 390
MAX_HEIGHT = 760
"""Pixels of a page shown (the top of it: the box, the summary, the first hits)."""


def _srcrawl(args: list[str], env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "srcrawl.app.cli", *args], env=env, check=True)


def _common_word(cfg: Config) -> str:
    """The word most titles of the demo hold (five letters or more): a query with many hits."""
    counts: Counter[str] = Counter()
    for title in cfg.store().some_titles(10_000):
        counts.update({w for w in title.lower().split() if w.isalpha() and len(w) >= 5})
    return counts.most_common(1)[0][0]


ADMIN_PASSWORD = "screenshots"  # the admin area of a portal on loopback, for the picture


def _shoot(url: str, query: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots: list[Path] = []

    def shot(page, name: str, clip_height: int = MAX_HEIGHT) -> None:
        path = out / name
        height = min(clip_height, page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(
            path=str(path),
            clip={"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height},
        )
        shots.append(path)

    results = url + "?" + urlencode({"q": query})
    # the first searches load what a process keeps (the pages' hosts, the completions):
    # the time a picture shows is that of a portal that has served a while
    for path in (results, url + "api/suggest?" + urlencode({"q": query[:2]})):
        for _ in range(3):
            requests.get(path, timeout=60).raise_for_status()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for scheme in ("light", "dark"):
            context = browser.new_context(
                viewport={"width": WIDTH, "height": 900}, color_scheme=scheme
            )
            page = context.new_page()
            page.goto(results)
            shot(page, f"portal-results-{scheme}.png")
            if scheme == "light":
                page.click("li.hit a.stored-link")
                page.wait_for_load_state()
                shot(page, "portal-stored.png")
                page.goto(url)
                page.locator("input[name=q]").press_sequentially(query[:2], delay=40)
                page.locator("#suggestions [role=option]").first.wait_for()
                page.locator("input[name=q]").press("ArrowDown")
                shot(page, "portal-suggest.png", 420)
            context.close()
        phone = browser.new_context(
            viewport={"width": PHONE_WIDTH, "height": 844},
            device_scale_factor=1,
            is_mobile=True,
            has_touch=True,
        )
        page = phone.new_page()
        page.goto(results)
        shot(page, "portal-mobile.png", 844)
        phone.close()
        admin = browser.new_context(viewport={"width": WIDTH, "height": 900})
        page = admin.new_page()
        page.goto(url + "admin")
        page.fill("input[name=password]", ADMIN_PASSWORD)
        page.click("button[type=submit]")
        page.locator("#jobs a").first.click()
        page.wait_for_load_state()
        shot(page, "portal-admin.png")
        admin.close()
        browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument(
        "--query", help="the query shown [default: the demo titles' most common word]"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="srcrawl-shots-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SRCRAWL_")}
        env["SRCRAWL_HOME"] = home
        _srcrawl(["demo", "--no-serve"], env)
        try:
            cfg = demo_config(Config.load(env=env))
            query = args.query or _common_word(cfg)
            password = AdminPassword.of(ADMIN_PASSWORD)
            portal = build_portal(cfg, threads=0, admin_token="", admin_password=password)
            with serving_in_thread(portal) as url:
                for path in _shoot(url, query, args.out):
                    print(f"{path}: {path.stat().st_size // 1024} KB")
        finally:
            _srcrawl(["down"], env)


if __name__ == "__main__":
    main()
