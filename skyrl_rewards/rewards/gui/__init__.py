"""GUI rewards: GUI-R1's action accuracy and GUI-G2's Gaussian grounding (``gui``) over the
parsed actions (``gui_actions``). Imports only the contract, the shared geometry and this folder.
"""
