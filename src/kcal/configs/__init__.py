"""The Hydra configs, shipped inside the package so an installed ``kcal`` finds them.

Entry points name them by Hydra's package search path (:data:`CONFIG_PATH`, ``pkg://kcal.configs``);
``hydra.initialize_config_dir`` callers (tests, ``compose``) use :data:`CONFIG_DIR`, the same files
as a directory.
"""

from pathlib import Path

CONFIG_PATH = "pkg://kcal.configs"
CONFIG_DIR = str(Path(__file__).resolve().parent)
