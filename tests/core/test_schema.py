"""The config schema (kcal.core.schema): every key of every composed config is declared once, every declared key
refuses the bad values of its type in one line naming it, and the entry points refuse them before anything is
written, as one line with exit status 2."""

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from kcal.configs import CONFIG_DIR, choices
from kcal.core.errors import ConfigError
from kcal.core.schema import Rule, Schema, close_keys, integer, items, number, shown, text
from kcal.orchestrate.reproduce import REPRODUCE_KEYS
from kcal.orchestrate.reproduce import SCHEMA as REPRODUCE
from kcal.reruns.ablation import ABLATION_KEYS
from kcal.reruns.ablation import SCHEMA as ABLATION
from kcal.reruns.paths import PATHS_KEYS
from kcal.reruns.paths import SCHEMA as PATHS
from kcal.reruns.seeds import SCHEMA as SEEDS
from kcal.reruns.seeds import SEEDS_KEYS
from kcal.run.setup import TRAIN_KEYS
from kcal.sweep.pruners import SETTINGS as PRUNERS
from kcal.sweep.search import SCHEMA as SWEEP
from kcal.sweep.search import SWEEP_KEYS

from ..common import run_modules

#: every key of every program, each declared once (``|`` refuses a key declared twice)
EVERY_KEY = TRAIN_KEYS | SWEEP_KEYS | SEEDS_KEYS | PATHS_KEYS | ABLATION_KEYS | REPRODUCE_KEYS
#: what each Hydra entry point checks before it starts
PROGRAMS = {"train": TRAIN_KEYS, "sweep": SWEEP, "seeds": SEEDS, "reproduce": REPRODUCE, "paths": PATHS,
            "ablation": ABLATION}  # fmt: skip
GROUPS = ("dataset", "model", "objective", "recalibrator", "trainer", "profile", "logger", "hparams_search",
          "experiment")  # fmt: skip
CLASSIFICATION = "breast-cancer"


def fitting(group: str, option: str) -> list[str]:
    """``group=option`` and a dataset it applies to (a classification objective, recalibrator or experiment)."""
    classes = (group == "objective" and option.startswith("xe")) or option in ("temperature",) or (
        group == "experiment" and option.endswith("classification")) or option == "softmax_mlp"  # fmt: skip
    return [f"{group}={option}", *([f"dataset={CLASSIFICATION}"] if classes and group != "dataset" else [])]


@pytest.fixture(scope="module")
def configs() -> dict[tuple[str, str], object]:
    """Every program's config as composed by default, and with every option of every group (in the sweep's
    config, which holds every group; ``paths``/``ablation`` add keys of their own only)."""
    out = {}
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for program in PROGRAMS:
            out[(program, "")] = compose(program)
        for group in GROUPS:
            for option in choices(group):
                out[("sweep", f"{group}={option}")] = compose("sweep", overrides=fitting(group, option))
        out[("train", "profile=smoke")] = compose("train", overrides=["profile=smoke"])
    return out


def test_every_key_of_every_config_is_declared(configs):
    """A key added to a config (a yaml of configs/ or of a group) but not to the schema fails here."""
    undeclared = {name: EVERY_KEY.undeclared(cfg) for name, cfg in configs.items()}
    assert {name: keys for name, keys in undeclared.items() if keys} == {}


def test_every_program_checks_every_key_of_its_config(configs):
    """Each entry point checks every key of its config but the run sizes its profile sets for later stages
    (``kcal sweep`` does not read ``seeds_run.n_seeds``)."""
    profile = set(EVERY_KEY.values(configs[("train", "profile=smoke")])) - set(
        EVERY_KEY.values(configs[("train", "")])
    )
    for program, schema in PROGRAMS.items():
        assert set(schema.undeclared(configs[(program, "")])) <= profile, program


def test_every_declared_key_is_a_key_of_some_config(configs):
    present = {key for cfg in configs.values() for key in EVERY_KEY.values(cfg)}
    stale = [k for k in EVERY_KEY.rules if not any(EVERY_KEY.rule(p) is EVERY_KEY.rules[k] for p in present)]
    assert stale == []


def test_every_composed_config_is_valid(configs):
    assert {name: EVERY_KEY.problems(cfg) for name, cfg in configs.items() if EVERY_KEY.problems(cfg)} == {}


def test_a_key_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice: seed"):
        TRAIN_KEYS | Schema({"seed": integer(0)})


def bad_values(rule: Rule) -> list:
    """Values of the wrong type, out of range or outside the choices for ``rule``."""
    out = [] if rule.null else [None]
    if rule.kind in ("integer", "number"):
        out += ["abc", math.nan, math.inf, -math.inf, [], True]
        if rule.low is not None:
            out += [rule.low if rule.above else rule.low - 1]
            out += [0] if rule.low >= 1 else []
        if rule.high is not None:
            out += [rule.high, 1e12]
        if rule.kind == "integer":
            out += [1.5, 1e12]
    elif rule.kind == "flag":
        out += ["abc", 1, []]
    elif rule.kind == "text":
        out += [1, [], *([] if "" in rule.words else [""]), *(["x"] if rule.prefix else [])]
    elif rule.kind == "choice":
        out += ["not-a-choice", 1, []]
    elif rule.kind == "list":
        out += ["abc", 1, *([] if rule.empty else [[]])]
        out += (
            [[v] for v in bad_values(rule.item) if v is not None and not isinstance(v, list)]
            if rule.item
            else []
        )
    else:  # mapping
        out += ["abc", 1, []]
    return out


def concrete(key: str, configs) -> tuple[str, object]:
    """A key of some composed config that ``key`` (perhaps a pattern) declares, and that config."""
    for cfg in configs.values():
        for k in EVERY_KEY.values(cfg):
            if EVERY_KEY.rule(k) is EVERY_KEY.rules[key]:
                return k, cfg
    raise AssertionError(f"no config holds {key}")


@pytest.mark.parametrize("pattern", sorted(EVERY_KEY.rules))
def test_every_key_refuses_bad_values_in_one_line_naming_it(pattern, configs):
    key, cfg = concrete(pattern, configs)
    rule = EVERY_KEY.rules[pattern]
    for value in bad_values(rule):
        bad = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
        OmegaConf.update(bad, key, value, merge=False)
        with pytest.raises(ConfigError) as err:
            EVERY_KEY.validate(bad)
        message = str(err.value)
        assert "\n" not in message and key in message, (key, value, message)
        mine = [p for p in EVERY_KEY.problems(bad) if key in p][0]
        if value == []:
            assert "[]" in mine, mine
        elif rule.kind == "choice" or (rule.kind == "list" and rule.item and rule.item.kind == "choice"):
            valid = (rule.item or rule).valid()
            assert str(valid[0]) in mine and str(valid[-1]) in mine, mine  # the valid choices listed
        elif isinstance(value, str | int | float) and not isinstance(value, bool) and rule.kind != "list":
            assert shown(value) in mine, mine  # the value itself


#: bad values of the issue's sweep over the keys a user sets (issue 68), each once accepted or a traceback
REPORTED = [("seeds", "seeds_run.chunk_size=-1"), ("seeds", "seeds_run.chunk_size=0"), ("sweep", "sweep.n_trials=-1"),
            ("sweep", "sweep.n_trials=1e12"), ("seeds", "seeds_run.n_seeds=0"), ("seeds", "seeds_run.n_seeds=-1"),
            ("reproduce", "reproduce.jobs=-1"), ("reproduce", "reproduce.jobs=0"), ("train", "dataset.max_train_rows=-1"),
            ("train", "objective.base_weight=0"), ("train", "decision_threshold=inf"), ("train", "model.kind=abc"),
            ("train", "objective.params.bandwidth_y=nan"), ("train", "seed=-1"), ("reproduce", "reproduce.datasets=[]"),
            ("train", "trainer.lr=0"), ("train", "trainer.lr=inf"), ("train", "trainer.max_epochs=0"),
            ("train", "trainer.batch_size=1"), ("train", "objective.weight=-1"), ("train", "trainer.patience=0"),
            ("sweep", "sweep.heartbeat_interval=0"), ("paths", "paths.grids.nll_mmd=[0,1]"),
            ("ablation", "ablation.n_seeds=0"), ("reproduce", "reproduce.sample_sizes=[0]")]  # fmt: skip


@pytest.mark.parametrize(("program", "override"), REPORTED)
def test_the_reported_bad_values_are_refused_naming_the_key(program, override):
    key = override.partition("=")[0]
    extra = ["objective=nll_mmd"] if key.startswith("objective.params") else []
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        found = PROGRAMS[program].problems(compose(program, overrides=[*extra, override]))
    assert len(found) == 1 and key in found[0], found


def test_an_empty_list_says_to_pass_null_where_null_means_all(configs):
    bad = OmegaConf.create(OmegaConf.to_container(configs[("reproduce", "")], resolve=False))
    bad.reproduce.datasets = []
    assert REPRODUCE.problems(bad) == [
        "reproduce.datasets=[] is empty; pass reproduce.datasets=null for the paper's datasets of the task"
    ]
    bad.reproduce.datasets = ["crime", "adult"]
    assert REPRODUCE.problems(bad)[0].startswith("reproduce.datasets: adult not of task=regression; pass ")


@pytest.mark.parametrize(
    ("program", "overrides", "problem"),
    [("train", ["trainer.min_epochs=30", "trainer.max_epochs=20"],
      "trainer.min_epochs=30 is above trainer.max_epochs=20; lower trainer.min_epochs or raise trainer.max_epochs"),
     ("train", ["objective=xe"], "objective=xe is for classification but dataset=crime is regression; choose "
                                 "one of: nll, nll_mmd, nll_mmd_local, nll_mmd_tanh"),
     ("train", ["recalibrator=temperature"], "recalibrator=temperature does not apply to regression; valid: "),
     ("sweep", ["++hparams_search.common={trainer.lr: {low: 1, high: 0.1}}"], "hparams_search entry trainer.lr: needs "),
     ("ablation", ["ablation.key=trainer.max_epoch"], "ablation.key=trainer.max_epoch is not a key of the config"),
     ("paths", ["dataset=crime", "paths.objectives=[xe_mmd]"], "paths.objectives: xe_mmd is not a regulariser of "
                                                               "regression; valid: nll_mmd, nll_mmd_tanh")],
)  # fmt: skip
def test_contradictory_values_are_refused(program, overrides, problem):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(program, overrides=overrides)
    found = PROGRAMS[program].problems(cfg)
    assert len(found) == 1 and found[0].startswith(problem), found


def test_rules_describe_what_is_valid():
    assert integer(1).problem("k", 0) == "k must be an integer >= 1, got 0"
    assert number(0, above=True, words=("median",), null="per batch").describe() == (
        "a finite number > 0, 'median' or null (per batch)"
    )
    assert (
        items(integer(0), empty="none").problem("k", [1, -1])
        == "k must be a list of integers >= 0, got [1, -1]"
    )
    assert (
        text(prefix="val/").problem("k", "loss")
        == "k must be a non-empty string starting with 'val/', got 'loss'"
    )
    assert close_keys("trainer.max_epoch", ["trainer.max_epochs", "trainer.lr", "seed"]) == [
        "trainer.max_epochs"
    ]
    assert close_keys("trainer.zzz", ["trainer.max_epochs", "trainer.lr", "seed"]) == ["trainer.lr",
                                                                                       "trainer.max_epochs"]  # fmt: skip


# ---- the entry points: one line, exit 2, nothing written -------------------------------------------------------
@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> tuple[Path, dict]:
    """Every entry point with a bad command line, in one subprocess whose working directory starts empty (Hydra's
    default run directories: ``outputs/`` there, or under each ``root``)."""
    cwd = tmp_path_factory.mktemp("refused")
    calls = {
        "seeds chunk_size": ("seeds", "dataset=crime", "profile=smoke", "seeds_run.chunk_size=-1", "root=r1"),
        "sweep n_trials": ("sweep", "dataset=crime", "profile=smoke", "sweep.n_trials=0", "root=r2"),
        "reproduce jobs": ("reproduce", "profile=smoke", "reproduce.jobs=-1", "root=r3"),
        "train bandwidth_y": (
            "train",
            "dataset=crime",
            "objective=nll_mmd",
            "objective.params.bandwidth_y=nan",
        ),
        "train unknown key": ("train", "trainer.max_epoch=3"),
        "train multirun": ("train", "-m", "seed=0,-1"),
        "reproduce datasets": ("reproduce", "reproduce.datasets=[]", "root=r4"),
        "paths n_seeds": ("paths", "dataset=crime", "paths.n_seeds=1", "root=r5"),
        "ablation grid": ("ablation", "ablation.grid=[]", "root=r6"),
        "sweep pruner": ("sweep", "sweep.pruner=abc", "root=r7"),
    }
    runs = run_modules([("kcal", list(args)) for args in calls.values()], cwd=cwd, timeout=600)
    return cwd, dict(zip(calls, runs, strict=True))


@pytest.mark.parametrize(
    ("call", "line"),
    [("seeds chunk_size", "seeds_run.chunk_size must be an integer >= 1, got -1"),
     ("sweep n_trials", "sweep.n_trials must be an integer >= 1, got 0"),
     ("reproduce jobs", "reproduce.jobs must be an integer >= 1 or null (the CPU count), got -1"),
     ("train bandwidth_y", "objective.params.bandwidth_y must be a finite number > 0 or null (the median heuristic "
                           "on each batch), got nan"),
     ("train unknown key", "no key trainer.max_epoch in kcal train's config; close keys: trainer.max_epochs, "
                           "trainer.min_epochs (to add a key of your own: +trainer.max_epoch=3)"),
     ("train multirun", "seed must be an integer >= 0 and < 4294967296, got -1"),
     ("reproduce datasets", "reproduce.datasets=[] is empty; pass reproduce.datasets=null for the paper's datasets "
                            "of the task"),
     ("paths n_seeds", "paths.n_seeds must be an integer >= 2, got 1"),
     ("ablation grid", "ablation.grid must be a non-empty list, got []"),
     ("sweep pruner", f"sweep.pruner must be one of: {', '.join(PRUNERS)} or null (every trial trains to its early "
                      "stop); got 'abc'")],
)  # fmt: skip
def test_a_bad_value_is_one_line_exit_2_and_writes_nothing(refused, call, line):
    cwd, runs = refused
    res = runs[call]
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == f"config error: {line}\n"
    assert res.stdout == ""
    assert list(cwd.iterdir()) == []  # no root, no study, no Hydra run directory
