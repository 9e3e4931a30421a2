"""Shared by the unit and integration tests of langchain-asymspec.

The project's pytest settings live in the root pyproject (strict asyncio mode), so the async tests of the
standard suite, which carry no marker, are marked here as they are collected.
"""

import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    if inspect.iscoroutinefunction(obj) and not any(mark.name == "asyncio" for mark in getattr(obj, "pytestmark", [])):
        pytest.mark.asyncio(obj)
    return None
