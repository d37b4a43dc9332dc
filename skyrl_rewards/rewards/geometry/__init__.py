"""Shared geometry, the one thing families share besides the contract: boxes and their formats.

``boxes`` (a box, IoU, parsing a predicted box, a row's image size) and
``box_formats`` (the coordinate systems models write boxes in, the conversion to
the row's original pixels, and :class:`~skyrl_rewards.rewards.geometry.box_formats.BoxComponent`,
the base of every reward that reads boxes or points), and ``converter`` (a row's
map to original pixels, counting the boxes it clamps). Imports only the contract.
"""
