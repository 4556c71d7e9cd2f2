"""Bytes and object storage, ground floor: object-store clients and listings, the one reader of
files and objects by ranges, atomic files and stores, files with their digest, the Hugging Face Hub."""
