"""Developer tools of the mmapbloom repository (not installed with the package).

A regular package so that ``python -m tools.bench`` from the repository root finds this
directory even if some installed distribution ships a top-level ``tools`` package.
"""
