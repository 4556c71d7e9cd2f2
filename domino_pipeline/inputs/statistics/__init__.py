"""Knowing the data: run_statistics.py (a run's statistics, gathered while it is processed),
array_statistics.py (the same from a stored run's arrays), column_moments.py and
column_quantiles.py (per-column moments and quantiles of a stream of blocks), cell_quality.py
(the shape of boundary cells), statistics_table.py (every run's statistics in one table),
run_quality.py (the runs that are wrong as runs)."""
