"""An emulated NT kernel that runs hvprof.sys (see ../README.md)."""
