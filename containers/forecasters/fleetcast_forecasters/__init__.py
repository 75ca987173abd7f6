"""Model families behind one seam: what a fitted model is served and exported through.

:mod:`.forecast` is what every family's compiled model answers; :mod:`.families` maps an
archive's ``model_kind`` to the family that compiles it.
"""
