"""The configuration, ground floor: the typed config (config.py, from its sections by
config_section.py, composed without Hydra by config_files.py), dataset profiles and their field
variables and force conventions, the runs a stage takes, the sources of a training run."""
