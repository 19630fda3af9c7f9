"""Tool retrieval among thousands of tools: BM25 (``tools.selection``), a contrastively trained
dense encoder over a flat index, their reciprocal-rank fusion, training pairs from scenarios and
trajectories, distractor catalogs, and recall@k / MRR."""
