"""Raw run folders -> one processed ``<run>.zarr`` per run (domino_pipeline/inputs/processing/process_runs.py).

The dataset profile (``dataset=drivaerml|ahmedml|windsorml|...``, conf/dataset/) says where each run
folder's files are and which field plays which role; fields are made dimensionless by role with
``physics``. Runs are processed in parallel (``process.num_processes`` at a time, in a local pool
or on a Dask cluster: ``executor``), each written atomically; finished runs are skipped on a rerun;
a bad run gets one line naming the file and the problem, and the command exits non-zero when any
run failed. ``data.runs`` and ``data.shard`` choose the runs (the jobs of an array split them). Each run's statistics are gathered while it is
streamed (``process.statistics``) and the folder's table written as
``<processed_dir>/statistics.csv``, with the runs the quality checks would leave out of
cache_data.py and train.py (``data.quality``; domino_pipeline/processed/run_quality.py);
benchmarks/dataset_report.py plots it.

    python process_data.py data.raw_dir=/data/drivaerml data.processed_dir=/data/processed
    python process_data.py data.raw_dir=s3://caemldatasets/drivaer/dataset data.runs=[1,2,5-10] \
        data.processed_dir=/data/processed      # read from the public bucket, unsigned, no local copy
    python process_data.py data.raw_dir=hf://datasets/neashton/drivaerml data.runs=[1] data.processed_dir=/data/processed
    python process_data.py --config-name=demo process.num_processes=2 process.overwrite=true
    python process_data.py data.runs=[1,2,5-10] data.shard=$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT
    python process_data.py executor.kind=dask executor.address=tcp://scheduler:8786
"""

from __future__ import annotations

from domino_pipeline.configuration.config import PipelineConfig
from domino_pipeline.runtime.entry_point import entry_point
from domino_pipeline.inputs.processing.process_options import ProcessOptions
from domino_pipeline.inputs.processing.process_runs import fetch_summary, process_all
from domino_pipeline.inputs.raw_files.raw_reading import RemoteAccess
from domino_pipeline.inputs.raw_files.remote_files import is_remote
from domino_pipeline.inputs.statistics.table_writer import quality_summary
from domino_pipeline.storage.object_store import is_url
from domino_pipeline.runtime.run_report import summarize


@entry_point
def main(config: PipelineConfig) -> int:
    """Process the runs of data.raw_dir into data.processed_dir; the exit code."""
    if is_url(config.data.processed_dir):
        raise ValueError(f"{config.data.processed_dir}: process_data.py writes to a local folder; "
                         "upload the processed runs there to read them from object storage")
    options = ProcessOptions.from_config(config.dataset, config.physics, config.process)
    access = RemoteAccess(anonymous=config.data.anonymous, verify=config.data.verify_checksums,
                          retry_deadline_s=config.data.retry_deadline_s)
    results = process_all(config.data.raw_dir, config.data.processed_dir, options,
                          num_processes=config.process.num_processes, overwrite=config.process.overwrite,
                          executor=config.executor, runs=config.data.runs, shard=config.data.shard, access=access)
    print(summarize(results, ("processed", "skipped", "failed")), flush=True)
    if is_remote(config.data.raw_dir):
        print(fetch_summary(results), flush=True)
    if config.process.statistics and any(r.status != "failed" for r in results):
        print(quality_summary(config.data, config.physics, config.dataset), flush=True)
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    main()
