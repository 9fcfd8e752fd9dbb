# The project's version (CMakeLists.txt's project(VERSION)); pyproject.toml reads it from there.
__version__ = "0.1.0"
