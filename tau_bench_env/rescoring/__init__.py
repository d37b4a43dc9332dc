"""Re-scoring recorded runs (``tau-bench-env rescore``) by replaying them as episodes.

- ``rescore``: replay a results file's runs, score them, pass^k and the summary.
- ``tau2_results``: reading tau2-bench's results files without tau2.
- ``results_file``: reading a results file from disk, size-capped, every failure one line.

Imports the episode layer and below; never ``evaluation`` or ``cli``.
"""
