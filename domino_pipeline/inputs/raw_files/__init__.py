"""Where a raw run's files are and how their bytes are read: run_folder.py (a local run folder's
files, by the dataset profile), concat_bytes.py (a file whole or in pieces, as one stream),
remote_files.py (what a remote run folder is made of: origin, objects, files), remote_runs.py (run
folders on object storage or the Hub, found by listing), remote_bytes.py (a
remote file's bytes as one stream, read by ranged GETs), array_staging.py (a remote file's needed
arrays decoded into local files), fetch_progress.py (progress bars of the bytes fetched),
raw_reading.py (one run's files read locally or from where they are published)."""
