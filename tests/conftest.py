"""Shared fixtures and helpers for the mmapbloom tests."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--torture", action="store_true", default=False,
                     help="run the slow reliability trials many more times (also MMAPBLOOM_TORTURE=1)")


@pytest.fixture
def torture(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--torture") or os.environ.get("MMAPBLOOM_TORTURE"))


def urls(n: int, prefix: str = "https://example.org/page/") -> list[str]:
    """n distinct, deterministic URL-like keys."""
    return [f"{prefix}{i}?q={i * 7919 % 10007}" for i in range(n)]
