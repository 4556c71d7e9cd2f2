"""Knowing the data: run_statistics.py (a run's statistics, gathered while it is processed),
array_statistics.py (the same from a stored run's arrays), column_moments.py and
column_quantiles.py (per-column moments and quantiles of a stream of blocks), cell_quality.py
(the shape of boundary cells), table_writer.py (every run's statistics in one table,
processed/statistics_table.py, which processed/run_quality.py reads to find the wrong runs)."""
