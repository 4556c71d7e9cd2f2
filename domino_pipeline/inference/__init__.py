"""Prediction with a trained DoMINO: read runs (run_inputs), run the model over every cell (full_resolution), integrate
forces (forces), report and write files (report, predict_runs); predict.py wires them from the Hydra config."""
