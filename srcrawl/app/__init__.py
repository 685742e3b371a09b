"""The application: the command line, the phase runner and its child processes, the
demo, ``status`` and ``health``. It may import every layer; no layer imports it."""
