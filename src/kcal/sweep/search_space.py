"""A sweep's search space (``hparams_search``): which config keys a trial samples or derives, and the
config a trial's parameters stand for.

An entry is sampled (``{choices: [...]}`` or ``{low, high[, log]}``) or derived (``{derive: formula}``,
:mod:`kcal.core.formula`); :func:`search_space` is what a study samples from (and what its fingerprint records,
:mod:`kcal.sweep.fingerprint`), :func:`sample` draws a trial's values, :func:`settings` and :func:`apply` turn
them into config values.
"""

from __future__ import annotations

import optuna
from omegaconf import DictConfig, OmegaConf

from kcal.core.errors import ConfigError
from kcal.core.formula import evaluate, formula_names, is_number, number
from kcal.core.storage_url import masked
from kcal.data import get_spec
from kcal.data.splits import split_sizes


def train_rows(cfg: DictConfig) -> int:
    """Rows in the training split this config trains on (the split sizes, capped by ``max_train_rows``)."""
    n_train = split_sizes(get_spec(cfg.dataset.name).n_used)[0]
    cap = cfg.dataset.get("max_train_rows")
    return min(n_train, int(cap)) if cap else n_train


def fit_to_data(space: dict[str, dict], n_train: int) -> dict[str, dict]:
    """Drop batch-size choices larger than the training split: such a config cannot train (every batch
    is dropped), so sampling it would spend a trial of the budget on nothing."""
    dist = space.get("trainer.batch_size")
    if dist is None or "choices" not in dist:
        return space
    fitting = [b for b in dist["choices"] if int(b) <= n_train]
    if not fitting:
        raise ConfigError(
            f"no trainer.batch_size choice of the search space fits the training split ({n_train} rows); "
            f"add a smaller one to hparams_search (choices: {list(dist['choices'])})"
        )
    return {**space, "trainer.batch_size": {**dist, "choices": fitting}}


def entries(cfg: DictConfig) -> dict[str, dict]:
    """``hparams_search``'s common entries plus those of ``cfg``'s objective, without null ones; empty when
    the config has no search space or the space does not cover the objective."""
    space = OmegaConf.select(cfg, "hparams_search")
    if space is None or cfg.objective.name not in space.objectives:
        return {}
    merged = {
        **OmegaConf.to_container(space.common),
        **OmegaConf.to_container(space.objectives[cfg.objective.name]),
    }
    return {k: v for k, v in merged.items() if v is not None}


def search_space(cfg: DictConfig) -> dict[str, dict]:
    """``hparams_search``'s common entries plus the objective's, as ``name -> entry``; an entry set to null
    (a space derived from another, e.g. ``median_x``) is not searched and the config's value stays.

    An entry is sampled (``{choices: [...]}`` or ``{low, high[, log]}``) or derived (``{derive: formula}``).
    A sampled entry's name is the config path it sets, unless it lists its paths in ``set``: one value for
    several keys (``set: [a, b]``), or none (``set: []``, a value only formulas use). A derived entry's
    name is a config path; its formula (numbers, names, ``+ - * / **``, parentheses) names entries or
    config keys, e.g. ``{derive: "1 / (nll_weight * trainer.batch_size)"}``. See :func:`settings`.
    """
    space = cfg.hparams_search
    if cfg.objective.name not in space.objectives:
        raise ConfigError(f"hparams_search={space.name} has no entry for objective {cfg.objective.name}; "
                          f"it covers: {', '.join(space.objectives)}")  # fmt: skip
    merged = entries(cfg)
    for path, entry in merged.items():
        if "derive" in entry:
            for name in formula_names(entry["derive"]):
                if name not in merged or "derive" in merged[name]:
                    number(name, OmegaConf.select(cfg, name), f"{path}'s formula {entry['derive']!r}")
    return fit_to_data(merged, train_rows(cfg))


def sample(trial: optuna.Trial, space: dict[str, dict]) -> dict:
    """The trial's sampled values by entry name (derived entries are computed by :func:`settings`)."""
    params = {}
    for path, dist in space.items():
        if "derive" in dist:
            continue
        if "choices" in dist:
            params[path] = trial.suggest_categorical(path, list(dist["choices"]))
        elif all(isinstance(dist[k], int) for k in ("low", "high")) and not dist.get("log"):
            params[path] = trial.suggest_int(path, dist["low"], dist["high"])
        else:
            params[path] = trial.suggest_float(
                path, float(dist["low"]), float(dist["high"]), log=bool(dist.get("log"))
            )
    return params


def settings(cfg: DictConfig, params: dict) -> dict:
    """The config values (``path -> value``) that ``params`` stand for under ``cfg``'s search space.

    A sampled entry's value goes to its ``set`` paths (default: its name); a name that is no entry of the
    space is a config path (e.g. an ablation's override). A derived entry is computed when ``params``
    hold one of its formula's names but not its own path, and every name has a value (``params``, then
    the values set here, then the config); otherwise the config's value stays. So a trial's and its best
    trial's params give the same config.
    """
    space = entries(cfg)
    out = {}
    for name, value in params.items():
        for path in space.get(name, {}).get("set", [name]):
            out[path] = value
    for path, entry in space.items():
        if "derive" not in entry or path in params or not formula_names(entry["derive"]) & params.keys():
            continue
        values = {name: params.get(name, out.get(name, OmegaConf.select(cfg, name)))
                  for name in formula_names(entry["derive"])}  # fmt: skip
        if all(map(is_number, values.values())):
            out[path] = evaluate(entry["derive"], values)
    return out


def apply(cfg: DictConfig, params: dict) -> DictConfig:
    """A resolved copy of ``cfg`` with the :func:`settings` of ``params`` set; its storage URL without a
    password, since runs save this config."""
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    if out.get("sweep") and out.sweep.get("storage"):
        out.sweep.storage = masked(str(out.sweep.storage))
    for path, value in settings(cfg, params).items():
        OmegaConf.update(out, path, value, merge=False)
    return out
