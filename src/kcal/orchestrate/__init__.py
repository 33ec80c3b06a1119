"""Stage: the whole protocol end to end (``kcal reproduce``), its worker processes, and its portable state
(``kcal state``).
"""
