"""Stage: what a reader opens, read from results: the paper's tables and claims, the report
(``kcal report``), Pareto fronts, figures, kept trials, budget curves and the protocol's spread.
"""
