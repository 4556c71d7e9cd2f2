"""The DoMINO data pipeline, one sub-package per stage of the data flow (docs/architecture.md lists
them in order, with the ground floor and the entry points); ``import domino_pipeline`` loads
neither torch nor Warp.
"""
