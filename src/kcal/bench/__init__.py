"""Stage: measurements of speed and cost: the benchmark table (``kcal bench``), the whole-protocol estimate,
sweep throughput, and the measurement programs (``python -m kcal.bench.<name>``).
"""
