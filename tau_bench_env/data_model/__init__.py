"""What a domain is made of: tasks, the episode's data, and its hash (the bottom layer).

- ``tasks``: ``Action``, ``Task``, reading tau-bench's and tau2's task JSON.
- ``episode_data``: copy-on-write episode data over a domain's shared base data.
- ``hashing``: tau-bench's data hash (``data_hash``) and the incremental ``HashIndex``.

These modules import no other module of ``tau_bench_env``.
"""
