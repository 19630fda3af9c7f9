"""BM25 ranking (``bm25s``), imported through here: bm25s sets its own logger to DEBUG on import,
which would put a line per index built into every run's log."""

import logging

import bm25s

logging.getLogger("bm25s").setLevel(logging.WARNING)

BM25 = bm25s.BM25
