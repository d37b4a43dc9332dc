"""The rewards' contract, below every family: what a component is and what it returns.

The component base and work keys (``component_base``), scores and statuses
(``result``), the model-lane request and outcome types (``lanes``), reading the
model's text (``text``, ``json_extract``), masking a batch's failed rows
(``masking``), the reward debug log (``debug_log``) and loading a hub tokenizer
(``hub``). Imports nothing else of the rewards layer.
"""
