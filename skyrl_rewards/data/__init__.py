"""Dataset rows: JSONL reading and writing (``jsonl``) and the pre-training row check (``check``)."""
