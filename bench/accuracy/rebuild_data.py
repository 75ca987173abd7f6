"""Rebuild make accuracy's data files (``shared/accuracy-data/*.parquet``, or
``FLEETCAST_ACCURACY_DATA``) from the public repositories they come from.

    .venv/bin/python -m bench.accuracy.rebuild_data \\
        --lcl-git-dir PATH/bogyshi+Data512/repo --sgsc-git-dir PATH/Sayani07+gravitas/repo \
        --cambridge-git-dir PATH/EECi+Cambridge-Estates-Building-Energy-Archive/repo

Each ``--*-git-dir`` is a clone (or bare mirror) of the repository named in
:data:`SOURCES`; the files are read at the pinned commit with ``git show``, so any clone
that has that commit rebuilds the same bytes. What each set is, its licence and how the
subset is taken: ``bench/accuracy/data/README.md``.

The readings are kept as the source has them: every reading of a chosen customer, with its
timestamp as written (local time, no offset), leading and trailing gaps, partial days and
zeros included. Nothing is filled, dropped, shifted or rounded.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.accuracy.datasets import DATA_DIR

# What the upload shape calls its columns (README: customer_id,timestamp,consumption).
COLUMNS = ("customer_id", "timestamp", "consumption")


@dataclass(frozen=True)
class Source:
    repository: str
    commit: str
    path: str
    output: str


SOURCES = {
    "lcl": Source(
        repository="bogyshi/Data512",
        commit="2fd2bc50636d7c8e02c8e82ac765d56e0b1e8b59",
        path="finalProject/data/pivotData",
        output="london-lcl-2013.parquet",
    ),
    "sgsc": Source(
        repository="Sayani07/gravitas",
        commit="77643a4fd12e535f7d70ce181e38ccfab2ba06e6",
        path="inst/extdata/smart_meter_50_tbl.rds",
        output="sgsc-nsw-2013.parquet",
    ),
    "cambridge": Source(
        repository="EECi/Cambridge-Estates-Building-Energy-Archive",
        commit="97b8a6b79a66296f54bf4f0c74c23b7d6b541bae",
        path="building_data/processed_data",
        output="cambridge-estates-2022-2023.parquet",
    ),
}
# The Cambridge buildings taken: every one with an electricity file for each of these years.
CAMBRIDGE_YEARS = (2022, 2023)
# London households taken, evenly spaced over the sorted ids of those wholly inside a block.
LCL_HOUSEHOLDS = 100
# The blocks read: those under 4 MiB each (the rest are larger than the snapshot this set
# was first built from carried). block5sep.csv repeats block4sep.csv byte for byte.
LCL_BLOCKS = (
    1,
    4,
    6,
    7,
    10,
    11,
    12,
    15,
    16,
    24,
    33,
    37,
    52,
    53,
    61,
    62,
    75,
    76,
    98,
    105,
    109,
    118,
    135,
    136,
    139,
    146,
    147,
    163,
    164,
    165,
    166,
    167,
    168,
)


def git_show(git_dir: Path, commit: str, path: str) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
    ).stdout


def lcl_readings(git_dir: Path) -> pd.DataFrame:
    """Low Carbon London, 2013: the repository's ``pivotData/block{n}sep.csv`` files hold one
    row per household and day with a column per half-hour (``00:00:00`` ... ``23:30:00``),
    empty where the household has no reading. A raw piece of the UKPN file starts and ends
    in the middle of a household, so each block's first and last household may be partial
    there and are left out."""
    source = SOURCES["lcl"]
    households: dict[str, pd.DataFrame] = {}
    for number in LCL_BLOCKS:
        content = git_show(git_dir, source.commit, f"{source.path}/block{number}sep.csv")
        block = pd.read_csv(io.BytesIO(content), dtype={"LCLid": str, "Date": str})
        block = block.drop(columns=[c for c in block.columns if c.startswith("Unnamed")])
        order = list(dict.fromkeys(block["LCLid"]))
        for household in order[1:-1]:
            if household not in households:
                households[household] = block[block["LCLid"] == household]
    ids = sorted(households)
    picked = [ids[int(i)] for i in np.linspace(0, len(ids) - 1, LCL_HOUSEHOLDS).round()]
    frames = []
    for household in picked:
        wide = households[household]
        long = wide.melt(id_vars=["LCLid", "Date"], var_name="time", value_name="consumption")
        long = long.dropna(subset=["consumption"])
        long["timestamp"] = pd.to_datetime(long["Date"] + " " + long["time"])
        frames.append(
            long.rename(columns={"LCLid": "customer_id"})[list(COLUMNS)].sort_values("timestamp")
        )
    return pd.concat(frames, ignore_index=True)


def sgsc_readings(git_dir: Path) -> pd.DataFrame:
    """Smart Grid, Smart City (Ausgrid, NSW), 2013: the package's 50 households, their
    ``general_supply_kwh`` (what the meter's general-supply channel read each half-hour)."""
    import pyreadr

    source = SOURCES["sgsc"]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "data.rds"
        path.write_bytes(git_show(git_dir, source.commit, source.path))
        frame = next(iter(pyreadr.read_r(str(path)).values()))
    readings = pd.DataFrame(
        {
            "customer_id": frame["customer_id"].astype("int64").astype(str),
            "timestamp": frame["reading_datetime"],
            "consumption": frame["general_supply_kwh"].astype("float64"),
        }
    )
    return readings.sort_values(["customer_id", "timestamp"], kind="stable", ignore_index=True)


def cambridge_readings(git_dir: Path) -> pd.DataFrame:
    """Cambridge University Estates, 2022-2023: each building's hourly electricity file per
    year (``{building}/electricity/{year}.csv``: ``datetime`` in UTC, ``equipment load
    [kWh]``), for every building that has both years."""
    source = SOURCES["cambridge"]
    listing = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", source.commit, source.path],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    years: dict[str, set[int]] = {}
    for name in listing:
        parts = name.split("/")
        if len(parts) == 5 and parts[3] == "electricity" and parts[4].endswith(".csv"):
            years.setdefault(parts[2], set()).add(int(parts[4].removesuffix(".csv")))
    frames = []
    for building in sorted(b for b, have in years.items() if set(CAMBRIDGE_YEARS) <= have):
        for year in CAMBRIDGE_YEARS:
            path = f"{source.path}/{building}/electricity/{year}.csv"
            frame = pd.read_csv(io.BytesIO(git_show(git_dir, source.commit, path)))
            frames.append(
                pd.DataFrame(
                    {
                        "customer_id": building,
                        "timestamp": pd.to_datetime(frame["datetime"]),
                        "consumption": frame["equipment load [kWh]"].astype("float64"),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def write(readings: pd.DataFrame, path: Path) -> None:
    table = pa.table(
        {
            "customer_id": pa.array(readings["customer_id"], pa.string()).dictionary_encode(),
            "timestamp": pa.array(readings["timestamp"].to_numpy("datetime64[s]")),
            "consumption": pa.array(readings["consumption"].to_numpy(np.float64)),
        }
    )
    pq.write_table(table, path, compression="zstd", compression_level=19)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lcl-git-dir", type=Path, required=True)
    parser.add_argument("--sgsc-git-dir", type=Path, required=True)
    parser.add_argument("--cambridge-git-dir", type=Path, required=True)
    options = parser.parse_args()
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for key, readings in (
        ("lcl", lcl_readings(options.lcl_git_dir)),
        ("sgsc", sgsc_readings(options.sgsc_git_dir)),
        ("cambridge", cambridge_readings(options.cambridge_git_dir)),
    ):
        path = DATA_DIR / SOURCES[key].output
        write(readings, path)
        print(
            f"{path.name}: {readings['customer_id'].nunique()} customers, {len(readings):,} "
            f"readings, {path.stat().st_size / 2**20:.1f} MiB"
        )


if __name__ == "__main__":
    main()
