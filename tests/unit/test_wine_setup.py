"""The opt-in Windows shim tests (`./run test --windows-shim`, tests/windows/) find Wine, or
say how to get it; they never run in `./run test`."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from turn_memory.devtools.wine import WineMissing, find_wine, windows_path


def test_no_wine_is_reported_with_how_to_install_it(tmp_path):
    with pytest.raises(WineMissing) as err:
        find_wine(which=lambda name: None, debian=tmp_path / "wine64")
    assert str(err.value) == (f"no Wine found (wine64, wine on PATH, or {tmp_path / 'wine64'}); "
                              "install Wine first (Debian/Ubuntu: apt-get install wine64)")


def test_wine_is_found_on_path_first_then_where_debian_puts_it(tmp_path):
    assert find_wine(which={"wine": "/opt/wine/bin/wine"}.get, debian=tmp_path / "x") == Path("/opt/wine/bin/wine")
    debian = tmp_path / "wine64"
    debian.write_text("")
    assert find_wine(which=lambda name: None, debian=debian) == debian


def test_unix_paths_become_the_z_drive_and_relative_ones_stay_relative():
    assert windows_path(PurePosixPath("/root/.cache/tm ü/node.exe")) == "Z:\\root\\.cache\\tm ü\\node.exe"
    assert windows_path(PurePosixPath("shim-js/test/bridge.test.js")) == "shim-js\\test\\bridge.test.js"

