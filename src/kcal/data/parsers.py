"""Per-dataset parsers: raw files -> (X, y) as the authors' loaders build them.

Each parser takes ``{logical file name: path}`` and returns ``(x, y, n_raw)``: float64 features,
targets (float64 for regression, int64 class ids for classification) and the number of rows in the
raw file before any row is dropped. Column choices, target transforms, one-hot encodings and
row-dropping follow the official implementation (see ``shared/reference`` §1.2 and the mirror's
MANIFEST); deviations are none by design.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

Parsed = tuple[np.ndarray, np.ndarray, int]
PARSERS: dict[str, Callable[[dict[str, Path]], Parsed]] = {}


def parser(name: str):
    def register(fn):
        PARSERS[name] = fn
        return fn

    return register


def _floats(df: pd.DataFrame) -> np.ndarray:
    return df.astype(np.float64).to_numpy()


def _labels(series: pd.Series) -> np.ndarray:
    """Class ids in sorted order of the unique values (``np.unique(..., return_inverse=True)``)."""
    _, inverse = np.unique(series.to_numpy(), return_inverse=True)
    return inverse.astype(np.int64)


@parser("crime")
def crime(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["communities_processed.csv"])
    return _floats(df.iloc[:, :-1]), df.iloc[:, -1].to_numpy(np.float64), len(df)


@parser("blog")
def blog(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["blogData_train.csv.gz"], header=None)  # compression inferred from suffix
    return _floats(df.iloc[:, :280]), np.log1p(df.iloc[:, 280].to_numpy(np.float64)), len(df)


@parser("medical_expenditure")
def medical_expenditure(files: dict[str, Path]) -> Parsed:
    with np.load(files["meps_data.npz"]) as npz:
        x, y = np.asarray(npz["X"], np.float64), np.asarray(npz["y"], np.float64).reshape(-1)
    return x, y, len(y)


@parser("superconductivity")
def superconductivity(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["train.csv"])
    return _floats(df.iloc[:, :81]), df["critical_temp"].to_numpy(np.float64), len(df)


@parser("fb_comment")
def fb_comment(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["Features_Variant_1.csv"], header=None)
    return _floats(df.iloc[:, :53]), np.log1p(df.iloc[:, -1].to_numpy(np.float64)), len(df)


@parser("breast_cancer")
def breast_cancer(files: dict[str, Path]) -> Parsed:
    cols = ["id", "diagnosis", *[f"f{i}" for i in range(30)]]
    df = pd.read_csv(files["wdbc.data"], header=None, names=cols)
    y = (df["diagnosis"] == "M").to_numpy(np.int64)
    return _floats(df.drop(columns=["id", "diagnosis"])), y, len(df)


@parser("heart_disease")
def heart_disease(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["heart_disease_uci.csv"])
    n_raw = len(df)
    df = df.drop(columns=["id", "dataset"]).dropna()  # before one-hot: leaves 299 rows (authors)
    for col in ("fbs", "exang"):
        df[col] = df[col].astype(str).str.upper().map({"TRUE": 1, "FALSE": 0}).astype(int)
    df = pd.get_dummies(df, columns=["sex", "cp", "restecg", "slope", "thal"])
    y = df.pop("num").to_numpy(np.int64)
    return _floats(df), y, n_raw


@parser("online_shoppers")
def online_shoppers(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["online_shoppers_intention.csv"])
    n_raw = len(df)
    df = df.dropna()
    df["Weekend"] = df["Weekend"].astype(int)
    y = df.pop("Revenue").astype(int).to_numpy(np.int64)
    df = pd.get_dummies(df, columns=["Month", "VisitorType"])
    return _floats(df), y, n_raw


@parser("dry_bean")
def dry_bean(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["dry_bean_dataset.csv"])
    y = _labels(df.pop("Class"))
    return _floats(df), y, len(df)


ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "educational-num", "marital-status", "occupation",
    "relationship", "race", "gender", "capital-gain", "capital-loss", "hours-per-week",
    "native-country", "income",
]  # fmt: skip


@parser("adult")
def adult(files: dict[str, Path]) -> Parsed:
    df = pd.read_csv(files["adult.data"], header=None, names=ADULT_COLUMNS, skipinitialspace=True)
    n_raw = len(df)
    df = df.replace("?", np.nan).dropna()
    y = _labels(df.pop("income"))
    categorical = ["workclass", "education", "marital-status", "occupation", "relationship", "race",
                   "gender", "native-country"]  # fmt: skip
    df = pd.get_dummies(df, columns=categorical)
    return _floats(df), y, n_raw


@parser("crop_yield")
def crop_yield(files: dict[str, Path]) -> Parsed:
    (path,) = files.values()
    df = pd.read_csv(path, dtype={"FIPS": str})
    n_raw = len(df)
    df = df[(df["crop"] == "Wheat") & (df["Year"] != 1990)]
    y = df["yield"].to_numpy(np.float64)
    return _floats(df.drop(columns=["crop", "FIPS", "yield"])), y, n_raw
