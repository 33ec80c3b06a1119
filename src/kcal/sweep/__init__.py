"""Stage: hyperparameter sweeps (Optuna TPE): the search space, the selection of a trial, the configuration
fingerprint, the studies' storage, and the sweep program (``kcal sweep``).
"""
