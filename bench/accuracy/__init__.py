"""``make accuracy``: fleetcast's served forecasts against the peers a user would pick
instead, on real public meter data (:mod:`bench.accuracy.suite`)."""
