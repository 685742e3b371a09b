"""srcrawl: a distributed crawler and search engine over Redis."""

import os as _os

__version__ = "0.1.0"

# Installed, the domain packages (master/, slave/, queues/, …) are inside this
# package. In a source checkout they sit beside it, at the top of the
# repository; a process started there (python -m …, python -c …) finds this
# directory first, so let it find them too.
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "queues")) and _os.path.isfile(
    _os.path.join(_root, "queues", "__init__.py")
):
    __path__.append(_root)  # type: ignore[name-defined]
