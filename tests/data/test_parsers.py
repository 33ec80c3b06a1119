"""Loaders of the three datasets absent from the mirror, on synthetic files of the same layout."""

import numpy as np
import pandas as pd
import pytest

from kcal.data import load
from kcal.data.parsers import PARSERS
from kcal.data.registry import FileSpec, RawFile, get_spec
from kcal.data.sources import git_blob_file

RNG = np.random.default_rng(0)


def write_superconductivity(path, n=50):
    cols = [f"feat{i}" for i in range(81)] + ["critical_temp"]
    pd.DataFrame(RNG.normal(size=(n, 82)), columns=cols).to_csv(path, index=False)


def write_fb_comment(path, n=40):
    data = RNG.integers(0, 20, size=(n, 54))
    pd.DataFrame(data).to_csv(path, index=False, header=False)
    return data


def write_meps(path, n=30):
    np.savez(path, X=RNG.normal(size=(n, 107)), y=RNG.normal(size=(n,)))


def test_superconductivity_layout(tmp_path):
    p = tmp_path / "train.csv"
    write_superconductivity(p)
    x, y, n_raw = PARSERS["superconductivity"]({"train.csv": p})
    df = pd.read_csv(p)
    assert x.shape == (50, 81) and n_raw == 50
    np.testing.assert_array_equal(y, df["critical_temp"].to_numpy())  # raw Kelvin, no log


def test_fb_comment_layout_log1p_target(tmp_path):
    p = tmp_path / "Features_Variant_1.csv"
    data = write_fb_comment(p)
    x, y, _ = PARSERS["fb_comment"]({"Features_Variant_1.csv": p})
    assert x.shape == (40, 53)
    np.testing.assert_allclose(y, np.log1p(data[:, -1]))


def test_meps_layout(tmp_path):
    p = tmp_path / "meps_data.npz"
    write_meps(p)
    x, y, _ = PARSERS["medical_expenditure"]({"meps_data.npz": p})
    assert x.shape == (30, 107) and y.shape == (30,)


@pytest.mark.parametrize(
    ("name", "fname", "writer"),
    [("superconductivity", "train.csv", write_superconductivity),
     ("fb-comment", "Features_Variant_1.csv", write_fb_comment),
     ("medical-expenditure", "meps_data.npz", write_meps)],
)  # fmt: skip
def test_full_load_path_with_a_verified_synthetic_file(name, fname, writer, tmp_path, monkeypatch):
    """The whole path (mirror lookup, blob check, parse, cache, split) on a stand-in file whose
    checksum is registered for the test only."""
    import kcal.data.dataset as dataset_mod
    import kcal.data.registry as registry

    mirror = tmp_path / "mirror" / name
    mirror.mkdir(parents=True)
    writer(mirror / fname)
    real = get_spec(name)
    fake = registry.DatasetSpec(
        **{**real.__dict__, "files": (RawFile((FileSpec(fname, git_blob=git_blob_file(mirror / fname)),)),)}
    )
    monkeypatch.setenv("KCAL_DATA_DIR", str(tmp_path / "mirror"))
    monkeypatch.setattr(dataset_mod, "get_spec", lambda n: fake)
    ds = load(name)
    assert ds.info.d == real.d and ds.info.sources[fname].startswith("mirror:")
    assert len(ds.train) + len(ds.val) + len(ds.test) == ds.info.n_used
