"""The raw-input stage's driver: process_runs.py (raw run folders -> processed runs, process_data.py's
work), process_options.py (the options of processing one run), field_divisors.py (each field's
divisor), published_forces.py (the coefficients and references a run folder publishes),
read_ahead.py (blocks of rows produced a few ahead in a thread)."""
