"""The process and its devices, ground floor: where it sits in a job (launch.py), its GPU
(devices.py), the commands' shared entry point, the executors of per-run tasks and their report."""
