"""Stage: reruns of a selected configuration: seed reruns (``kcal seeds``), ablations (``kcal ablation``),
regularisation paths (``kcal paths``) and the local-calibration runs.
"""
