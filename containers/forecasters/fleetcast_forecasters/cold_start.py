"""A cold start, served: the fleet family's forecast of a customer whose history is too
short for a model of its own (days rather than weeks: a new connection, a meter installed
last week). The fleet's trees forecast it from what it has, scaled to its own level, as
they forecast every customer (fleetcast_training.fleet); its archive is a fleet model's
(:mod:`fleetcast_forecasters.fleet`) under a kind of its own, so that what it is, and that
it has no backtest, is never mistaken for a model chosen by one.
"""

from __future__ import annotations

from fleetcast_contracts.families import COLD_START
from fleetcast_forecasters.fleet import FleetFamily

KIND = COLD_START

FAMILY = FleetFamily(KIND)
