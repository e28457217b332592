"""The porcupine-style linearizability checker (C++ with pybind11): a later issue.

Nothing is implemented here yet; the package exists so the layout of ARCHITECTURE.md is
complete and the build lists it.
"""
