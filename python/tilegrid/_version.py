# The package version, the only place it is written: pyproject.toml and CMakeLists.txt read it.
__version__ = "0.1.0"
