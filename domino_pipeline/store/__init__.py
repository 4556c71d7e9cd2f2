"""The cache store: its format and manifest, checked chunk reads, atomic writes."""
