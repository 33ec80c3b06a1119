"""Stage: reruns of a selected configuration: seed reruns (``kcal seeds``), ablations (``kcal ablation``) and
the local-calibration runs.
"""
