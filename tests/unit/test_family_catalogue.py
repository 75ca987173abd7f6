"""The family catalogue is the one list (issue 39, 43): a new family is one module and, in
the catalogue, its kind's name and its line; training, serving, the combination and the
export then know it."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetcast_contracts import families as catalogue
from fleetcast_contracts.families import FAMILIES, Fit
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.training import CANDIDATE_KINDS
from fleetcast_forecasters import combination
from fleetcast_forecasters.families import known_kinds
from fleetcast_training import level_shift, run_exports, selection
from fleetcast_training.customer_training import NUMPY_FAMILIES

ROOT = Path(__file__).resolve().parents[2]

# A family written as a user would: each weekday the mean of its last four, repeated.
NEW_FAMILY = """
import numpy as np
from fleetcast_contracts.families import WEEKLY_MEAN
from fleetcast_forecasters.repeated_season import RepeatedSeason
from fleetcast_forecasters.seasonal_naive import seasonal_sigma

KIND = WEEKLY_MEAN


class _WeeklyMean(RepeatedSeason):
    kind = KIND

    def profile(self, values, origin, season):
        weeks = np.stack([values[origin - k * season : origin - (k - 1) * season] for k in range(1, 5)])
        return np.nanmean(weeks, axis=0), seasonal_sigma(values, origin, season)

    def deviations(self, sigma, horizon, season):
        return np.full(horizon, sigma)


FAMILY = _WeeklyMean()
"""

CHECK = """
import json
from fleetcast_contracts.model_archive import read_archive
from fleetcast_training.customer_training import NUMPY_FAMILIES
from test_training_job import Instance, run_container, weekly_series

instance = Instance.create(__import__("pathlib").Path(r"{root}"), candidates="ets,theta,weekly_mean")
instance.add_part("part-00000.parquet", {{f"c{{i}}": weekly_series(i) for i in range(3)}})
assert run_container(instance).exit_code == 0, instance.failure()
_, metadata = read_archive(instance.archive("c0"))
print(json.dumps({{
    "batch": sorted(NUMPY_FAMILIES),
    "scored": [c.model_kind for c in metadata.backtest.candidates],
    "served": metadata.model_kind,
}}))
"""


def test_every_list_of_families_is_the_catalogues() -> None:
    assert set(CANDIDATE_KINDS) == {f.kind for f in FAMILIES if f.candidate}
    assert set(NUMPY_FAMILIES) == {f.kind for f in FAMILIES if f.fit is Fit.BATCH}
    for frequency in Frequency:
        assert set(selection.COMBINED[frequency]) == {f.kind for f in FAMILIES if f.combined}
    assert set(level_shift.ALWAYS_FOLLOW) == {f.kind for f in FAMILIES if f.follows_level_shift}
    assert set(combination.COMBINING) == {f.kind for f in FAMILIES if f.fit is Fit.MADE_OF_MEMBERS}
    scored = (f.kind for f in FAMILIES if f.candidate or f.fit is Fit.MADE_OF_MEMBERS)
    assert tuple(scored) == run_exports.SCORED_KINDS
    assert set(known_kinds()) == {f.kind for f in FAMILIES}
    # And each family's module has the FAMILY of its kind
    for family in FAMILIES:
        assert importlib.import_module(family.module).FAMILY.kind == family.kind
    assert catalogue.BY_KIND.keys() == {f.kind for f in FAMILIES}


def test_a_new_family_is_one_module_and_its_catalogue_entry(tmp_path: Path) -> None:
    # Given the contracts with the family's kind named and its line added to the catalogue,
    # and the family's module
    contracts = tmp_path / "code" / "fleetcast_contracts"
    shutil.copytree(ROOT / "layers" / "common" / "fleetcast_contracts", contracts)
    listing = contracts / "families.py"
    text = listing.read_text()
    listing_start, last = "FAMILIES: tuple[Family, ...] = (", "    Family(COLD_START,"
    assert listing_start in text and last in text
    text = text.replace(listing_start, f'WEEKLY_MEAN = "weekly_mean"\n\n{listing_start}')
    listing.write_text(
        text.replace(
            last,
            '    Family(WEEKLY_MEAN, "weekly_mean_family", Fit.BATCH, combination_weight=1.0),\n'
            + last,
        )
    )
    (tmp_path / "code" / "weekly_mean_family.py").write_text(NEW_FAMILY)

    # When a training instance runs with the new family a candidate
    script = CHECK.format(root=tmp_path / "opt-ml")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path / "code"), str(ROOT / "tests" / "unit"), str(ROOT / "tests")]
        ),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )

    # Then it is fitted with the batch families, scored, and combined
    assert done.returncode == 0, done.stderr[-3000:]
    found = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert "weekly_mean" in found["batch"]
    assert {"weekly_mean", "ets", "theta", "seasonal_naive"} <= set(found["scored"])
    assert found["served"] in {"combination", "naive_blend", "seasonal_naive"}
