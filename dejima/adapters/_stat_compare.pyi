from typing import final

@final
class Stat:
    """What the walk reads of one lstat, under os.stat_result's names."""

    n_fields: int
    st_mode: int
    st_ino: int
    st_dev: int
    st_nlink: int
    st_uid: int
    st_gid: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int

def same_directory(
    fd: int, joined: str, separator: str, columns: tuple[str, ...], values: list[list[int]], /
) -> bool: ...
def lstat_all(fd: int, names: list[str], /) -> tuple[list[str], list[Stat]]: ...
