"""Text rewards: math answer checking (``math_check`` with its child process ``math_child``),
multiple choice (``choice``), length and repetition shaping (``shaping``) and the think/answer
format checks (``format_checks``). Imports only the contract and the shared geometry.
"""
