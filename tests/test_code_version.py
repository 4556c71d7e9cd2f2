"""The preprocessing code's version is part of every cache fingerprint; this test fails when the
code that computes a cache's contents changes without PREPROCESS_CODE_VERSION being bumped, so a
cache built by older code is refused as stale instead of being read as current."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from domino_pipeline.compute.settings import PREPROCESS_CODE_VERSION

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("compute/settings", "compute/rows", "compute/volume_order", "compute/preprocessing",
           "compute/geometry", "configuration/variables")
# PREPROCESS_CODE_VERSION -> the hash of its code (docstrings and comments left out). A change
# that leaves every cache's contents as they were (a refactor) records its hash in place.
RECORDED = {1: "fa8b4106e88754157fddc1a8b3cb5adf80778ae57634caab7bbd779dc68b848e",
            2: "2657ced25fd1dce230d04f0eed355e10d489db9e3c88e63ee23d6de4207b283f"}  # 2 also: the ground floor's modules in folders; roles and kinds no existing cache uses; column_names moved here; parts_of renamed held_parts; the kNN's search of every pair for small searches, its pilot's start, the pilot's rows kept (the same rows, tests/test_knn_ties.py); the surface rows and scalars of an item built in one place; one-use kNN and SDF steps folded in (a refactor)


def code_hash() -> str:
    """SHA-256 of the modules' syntax trees without docstrings: what the code does, not how
    it is described."""
    digest = hashlib.sha256()
    for name in MODULES:
        tree = ast.parse((ROOT / "domino_pipeline" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        text = ast.dump(tree)
        text = text.replace(f"value={PREPROCESS_CODE_VERSION})", "value=VERSION)")  # the number itself
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


def test_the_code_version_is_bumped_when_the_preprocessing_code_changes():
    assert RECORDED.get(PREPROCESS_CODE_VERSION) == code_hash(), (
        "the code that computes a cache's contents changed: bump PREPROCESS_CODE_VERSION in "
        f"domino_pipeline/compute/settings.py and record {code_hash()} for it here")


def test_the_code_version_is_in_every_fingerprint():
    from cache_fixtures import tiny_settings

    assert tiny_settings().fingerprinted()["code_version"] == PREPROCESS_CODE_VERSION
