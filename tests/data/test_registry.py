import json

import pytest

from kcal.data import UnknownDatasetError, dataset_names, get_spec, load
from kcal.data.registry import PAPER_CLASSIFICATION, PAPER_REGRESSION

PAPER_SHAPES = {
    "crime": (102, None), "blog": (280, None), "medical-expenditure": (107, None),
    "superconductivity": (81, None), "fb-comment": (53, None), "breast-cancer": (30, 2),
    "heart-disease": (23, 5), "online-shoppers": (28, 2), "dry-bean": (16, 7), "adult": (104, 2),
}  # fmt: skip


def test_registry_lists_the_papers_ten_datasets_with_their_shapes():
    names = dataset_names()
    assert names[:10] == list(PAPER_REGRESSION + PAPER_CLASSIFICATION)
    for name, (d, m) in PAPER_SHAPES.items():
        spec = get_spec(name)
        assert (spec.d, spec.m) == (d, m)
        assert spec.task == ("classification" if m else "regression")
        for raw in spec.files:
            assert any(f.sha256 or f.git_blob for f in raw.forms), f"{name}/{raw.name} has no checksum"


def test_checksums_match_the_mirror_manifest():
    from pathlib import Path

    manifest = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "manifest.json"
    if not manifest.is_file():
        pytest.skip("shared/datasets/manifest.json not beside the checkout")
    by_path = {
        f["path"].split("/", 1)[1]: f["sha256"] for e in json.loads(manifest.read_text()) for f in e["files"]
    }
    for name in dataset_names():
        for raw in get_spec(name).files:
            for form in raw.forms:
                key = f"{name}/{form.name}"
                if key in by_path:
                    assert form.sha256 == by_path[key], key


def test_in_mirror_says_whether_every_raw_file_is_in_the_mirror_manifest():
    """``in_mirror`` (the tables' "not available offline") is true exactly for the datasets whose every raw
    file has a form in the shared offline mirror's manifest."""
    from pathlib import Path

    manifest = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "manifest.json"
    if not manifest.is_file():
        pytest.skip("shared/datasets/manifest.json not beside the checkout")
    held = {f["path"].split("/", 1)[1] for e in json.loads(manifest.read_text()) for f in e["files"]}
    for name in dataset_names():
        spec = get_spec(name)
        every = all(any(f"{name}/{form.name}" in held for form in raw.forms) for raw in spec.files)
        assert spec.in_mirror == every, name
    assert not get_spec("superconductivity").in_mirror and get_spec("crime").in_mirror


def test_unknown_name_lists_valid_names():
    with pytest.raises(UnknownDatasetError) as err:
        load("crimes")
    msg = str(err.value)
    assert "crimes" in msg and all(n in msg for n in PAPER_REGRESSION + PAPER_CLASSIFICATION)


def test_unknown_protocol_is_rejected():
    with pytest.raises(ValueError, match="official, clean"):
        load("crime", protocol="leaky")


def test_fb_comment_is_the_authors_file_in_the_mirror():
    """fb-comment's registry entry is the authors' ``Features_Variant_1.csv`` (their git blob id), 40949 rows
    of 53 features; where the mirror holds the file, its bytes have that blob id."""
    from kcal.data.sources import git_blob_file

    from .conftest import mirror_has, real_path

    spec = get_spec("fb-comment")
    (raw,) = spec.files
    assert raw.forms[0].git_blob == "81d3e8b99b86f561a3a33f3b88e505995232c42b"
    assert (spec.n_used, spec.d, spec.m) == (40949, 53, None)
    if mirror_has("fb-comment"):
        assert spec.in_mirror
        assert git_blob_file(real_path("fb-comment", raw.name)) == raw.forms[0].git_blob
