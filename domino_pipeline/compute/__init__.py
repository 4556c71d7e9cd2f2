"""The per-run computation: Warp geometry kernels, preprocessing, sampling, target scaling."""
