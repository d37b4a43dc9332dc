"""The reward functions: pure Python over model text and dataset fields.

No Ray, no skyrl-gym: this layer is what a TRL script, a math child process
or a pool worker imports. Per-sample functions (VLM-R1's names) live in one
module per idea (``accuracy``, ``rec`` for box IoU, ``detection``, ``shaping``
for length and repetition, ``format_checks``); ``components``, ``registry`` and
``mix`` turn them into named, weighted components with typed statuses
(``result``); ``batch`` wraps them in TRL's batch convention.
"""
