"""The Hydra configs: the repository's top-level ``configs/``, which is also the package ``kcal.configs``
(``src/kcal/configs`` is a link to it), so a wheel ships them and an installed ``kcal`` finds them.

Entry points name them by Hydra's package search path (:data:`CONFIG_PATH`, ``pkg://kcal.configs``);
``hydra.initialize_config_dir`` callers (tests, ``compose``) use :data:`CONFIG_DIR`, the same files
as a directory. A user's own configs go in another directory, added with Hydra's ``--config-dir``
(``hydra.searchpath``) ahead of these.
"""

from pathlib import Path

CONFIG_PATH = "pkg://kcal.configs"
CONFIG_DIR = str(Path(__file__).resolve().parent)


def choices(group: str) -> list[str]:
    """The configs of ``group`` (``dataset``, ``objective``, ``profile``, ...), as a command line names them
    (``dataset=crime``; a nested file ``experiment/a/b.yaml`` is ``a/b``), sorted; empty for no such group."""
    folder = Path(CONFIG_DIR) / group
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))
