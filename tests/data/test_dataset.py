"""Every dataset in the mirror loads with the paper's d and m and the authors' row counts."""

import numpy as np
import pytest
import torch

from kcal.data import load
from kcal.data.parsers import PARSERS
from kcal.data.registry import get_spec
from kcal.data.sources import locate
from kcal.data.splits import split_sizes

from .conftest import mirror_has

# name: (n raw, n used, d, m) as the authors' loaders give them on the mirror's files
EXPECTED = {
    "crime": (1993, 1993, 102, None),
    "blog": (52397, 52397, 280, None),
    "fb-comment": (40949, 40949, 53, None),
    "breast-cancer": (569, 569, 30, 2),
    "heart-disease": (920, 299, 23, 5),
    "online-shoppers": (12330, 12330, 28, 2),
    "dry-bean": (13611, 13611, 16, 7),
    "adult": (32561, 30162, 104, 2),
    "crop-yield": (2845, 2845, 75, None),
}
MIRRORED = [pytest.param(n, marks=pytest.mark.skipif(not mirror_has(n), reason=f"{n} not available offline"))
            for n in EXPECTED]  # fmt: skip


def raw_arrays(name):
    spec = get_spec(name)
    return PARSERS[spec.parser]({k: v.path for k, v in locate(spec, download=False).items()})


@pytest.mark.parametrize("name", MIRRORED)
def test_shapes_counts_and_splits(name):
    n_raw, n_used, d, m = EXPECTED[name]
    ds = load(name)
    info = ds.info
    assert (info.n_raw, info.n_used, info.d, info.m) == (n_raw, n_used, d, m)
    sizes = tuple(len(s) for s in (ds.train, ds.val, ds.test))
    assert (
        sizes
        == split_sizes(n_used)
        == (int(0.7 * n_used), int(0.1 * n_used), n_used - int(0.7 * n_used) - int(0.1 * n_used))
    )
    for s in (ds.train, ds.val, ds.test):
        assert s.x.dtype == torch.float32 and s.x.shape[1] == d
        assert torch.isfinite(s.x).all()
        if m is None:
            assert s.y.dtype == torch.float32 and torch.isfinite(s.y).all()
        else:
            assert s.y.dtype == torch.int64 and 0 <= int(s.y.min()) and int(s.y.max()) < m
    if m is not None:
        all_y = torch.cat([ds.train.y, ds.val.y, ds.test.y])
        assert torch.unique(all_y).numel() == m


@pytest.mark.parametrize("n", [10, 299, 1993])
def test_split_indices_disjoint_covering_deterministic(n):
    from torch.utils.data import random_split

    from kcal.data.splits import split_indices

    tr, va, te = split_indices(n, seed=3)
    assert torch.equal(torch.sort(torch.cat([tr, va, te])).values, torch.arange(n))
    assert (len(tr), len(va), len(te)) == split_sizes(n)
    again = split_indices(n, seed=3)
    assert all(torch.equal(a, b) for a, b in zip((tr, va, te), again, strict=True))
    assert not torch.equal(split_indices(n, seed=4)[0], tr)
    # identical to the authors' torch.utils.data.random_split with Generator().manual_seed(seed)
    ref = random_split(range(n), list(split_sizes(n)), generator=torch.Generator().manual_seed(3))
    assert [list(r) for r in ref] == [tr.tolist(), va.tolist(), te.tolist()]


@pytest.mark.parametrize("name", [p for p in MIRRORED if p.values[0] in ("crime", "heart-disease")])
@pytest.mark.parametrize("protocol", ["official", "clean"])
def test_load_is_deterministic(name, protocol):
    a, b = load(name, protocol=protocol, seed=7), load(name, protocol=protocol, seed=7)
    for sa, sb in zip((a.train, a.val, a.test), (b.train, b.val, b.test), strict=True):
        assert torch.equal(sa.x, sb.x) and torch.equal(sa.y, sb.y)


def test_official_split_ignores_seed_clean_split_follows_it():
    if not mirror_has("crime"):
        pytest.skip("crime not available offline")
    o1, o2 = load("crime", "official", seed=1), load("crime", "official", seed=99)
    assert torch.equal(o1.test.y, o2.test.y) and o1.info.split_seed == o2.info.split_seed == 1
    c1, c2 = load("crime", "clean", seed=1), load("crime", "clean", seed=99)
    assert not torch.equal(c1.test.y, c2.test.y)


@pytest.mark.skipif(not mirror_has("crime"), reason="crime not available offline")
def test_official_statistics_come_from_all_rows():
    x_raw, y_raw, _ = raw_arrays("crime")
    ds = load("crime", "official")
    from kcal.data.splits import split_indices

    tr, va, te = (i.numpy() for i in split_indices(len(y_raw), 1))
    mean, std = x_raw.mean(0), x_raw.std(0)
    keep = std > 1e-12
    expected_x = np.zeros_like(x_raw)
    expected_x[:, keep] = (x_raw[:, keep] - mean[keep]) / std[keep]
    np.testing.assert_allclose(ds.train.x.numpy(), expected_x[tr], atol=1e-5)
    np.testing.assert_allclose(ds.test.x.numpy(), expected_x[te], atol=1e-5)
    # target: centred on the full-dataset median, not scaled
    assert ds.info.y_center == pytest.approx(np.median(y_raw)) and ds.info.y_scale == 1.0
    np.testing.assert_allclose(ds.val.y.numpy(), y_raw[va] - np.median(y_raw), atol=1e-6)


@pytest.mark.skipif(not mirror_has("crime"), reason="crime not available offline")
def test_clean_statistics_come_from_train_rows():
    x_raw, y_raw, _ = raw_arrays("crime")
    ds = load("crime", "clean", seed=5)
    from kcal.data.splits import split_indices

    tr, _, te = (i.numpy() for i in split_indices(len(y_raw), 5))
    mean, std = x_raw[tr].mean(0), x_raw[tr].std(0)
    keep = std > 1e-12
    expected_te = np.zeros_like(x_raw[te])
    expected_te[:, keep] = (x_raw[te][:, keep] - mean[keep]) / std[keep]
    np.testing.assert_allclose(ds.test.x.numpy(), expected_te, atol=1e-4)
    assert ds.info.y_center == pytest.approx(y_raw[tr].mean())
    assert ds.info.y_scale == pytest.approx(y_raw[tr].std())
    np.testing.assert_allclose(ds.train.y.numpy().mean(), 0.0, atol=1e-5)
    np.testing.assert_allclose(ds.train.y.numpy().std(), 1.0, atol=1e-4)
    # back to original units
    np.testing.assert_allclose(ds.test.y.numpy() * ds.info.y_scale + ds.info.y_center, y_raw[te], atol=1e-5)


@pytest.mark.skipif(not mirror_has("blog"), reason="blog not available offline")
def test_a_second_load_reads_the_processed_cache(monkeypatch):
    """The second load reads the processed cache: the parser is not called again (no wall-clock bound, which
    a loaded machine breaks)."""
    from kcal.data import dataset

    load("blog")  # parses (or reuses) the cache
    parser = dataset.PARSERS[dataset.get_spec("blog").parser]
    calls = []
    monkeypatch.setitem(
        dataset.PARSERS, dataset.get_spec("blog").parser, lambda files: calls.append(files) or parser(files)
    )
    ds = load("blog")
    assert ds.info.n_used == 52397
    assert calls == [], "the cached blog load parsed the raw files again"


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """The real mirror and an empty processed cache under tmp_path; returns the processed cache dir."""
    monkeypatch.setenv("KCAL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "processed"


def rewrite_cache(path, **changes):
    with np.load(path) as npz:
        fields = {k: npz[k] for k in npz.files}
    np.savez(path, **(fields | changes))


@pytest.mark.skipif(not mirror_has("breast-cancer"), reason="breast-cancer not available offline")
@pytest.mark.parametrize("fault", ["nan", "edited", "other key", "old format"])
def test_a_cache_file_that_does_not_verify_is_rebuilt_with_a_line_naming_it(tmp_cache, capsys, fault):
    from kcal.data import dataset

    first = load("breast-cancer")
    (path,) = tmp_cache.glob("breast-cancer-*.npz")
    with np.load(path) as npz:
        x, y, n_raw = npz["x"].copy(), npz["y"], int(npz["n_raw"])
    if fault == "nan":  # NaN features under a digest that matches them: only the finite check catches it
        x[:] = np.nan
        rewrite_cache(path, x=x, digest=dataset.arrays_digest(x, y, n_raw))
    elif fault == "edited":  # one value changed after the digest was written
        x[3, 4] += 1.0
        rewrite_cache(path, x=x)
    elif fault == "other key":
        rewrite_cache(path, key="0" * 20)
    else:  # a file of PARSE_VERSION 1: no key, no digest
        np.savez(path, x=x, y=y, n_raw=n_raw)
    capsys.readouterr()
    again = load("breast-cancer")
    err = capsys.readouterr().err
    assert f"rebuilding the processed cache {path}" in err and len(err.strip().splitlines()) == 1
    # the rebuilt rows are the parsed ones (float tolerance far below the planted +1.0 of the "changed value" fault)
    torch.testing.assert_close(again.train.x, first.train.x)
    torch.testing.assert_close(again.test.y, first.test.y)
    assert load("breast-cancer") and capsys.readouterr().err == ""  # rebuilt: verifies from now on


@pytest.mark.skipif(not mirror_has("breast-cancer"), reason="breast-cancer not available offline")
def test_a_parse_that_gives_nan_is_refused_naming_the_dataset(tmp_cache, monkeypatch):
    from kcal.data import dataset

    key = dataset.get_spec("breast-cancer").parser
    real = dataset.PARSERS[key]

    def nan_parser(files):
        x, y, n_raw = real(files)
        x = x.copy()
        x[7, 0] = np.nan
        return x, y, n_raw

    monkeypatch.setitem(dataset.PARSERS, key, nan_parser)
    with pytest.raises(dataset.ParsedDataError, match=r"parsing breast-cancer from .*wdbc.data gave NaN or "
                                                      r"infinite features \(row 7\)"):  # fmt: skip
        load("breast-cancer")
    assert not list(tmp_cache.glob("*.npz"))  # nothing cached
