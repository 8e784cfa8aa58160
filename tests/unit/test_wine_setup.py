"""The opt-in Windows tests (`./run test --windows`, tests/windows/) run under Wine 10 in a
Debian trixie chroot built in the cache; they never run in `./run test`. What the set-up
decides without building anything: where it fetches Debian from, how paths look on Windows,
and the one command that runs a Windows program in the chroot."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from turn_memory.devtools.wine import WineRoot, debian_mirror, windows_path


def test_unix_paths_become_the_z_drive_and_relative_ones_stay_relative():
    assert windows_path(PurePosixPath("/root/.cache/tm ü/node.exe")) == "Z:\\root\\.cache\\tm ü\\node.exe"
    assert windows_path(PurePosixPath("shim-js/test/bridge.test.js")) == "shim-js\\test\\bridge.test.js"


def test_the_chroot_comes_from_the_mirror_apt_already_uses(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    deb822 = tmp_path / "debian.sources"
    deb822.write_text("Types: deb\n# http://snapshot.debian.org/x\nURIs: http://mirror.example/debian/\nSuites: bookworm\n")
    assert debian_mirror([deb822]) == "http://mirror.example/debian"
    legacy = tmp_path / "sources.list"
    legacy.write_text("deb [arch=amd64] http://deb.example/debian bookworm main\n")
    assert debian_mirror([tmp_path / "missing", legacy]) == "http://deb.example/debian"
    assert debian_mirror([]) == "http://deb.debian.org/debian"
    monkeypatch.setenv("DEBIAN_MIRROR", "http://own/debian")
    assert debian_mirror([deb822]) == "http://own/debian"


def test_a_windows_program_runs_on_drive_c_in_a_private_mount_namespace():
    wine = WineRoot(Path("/c/turn-memory/windows-v1"))
    argv = wine.argv(["Z:\\x\\dsh.exe", "--version"], cwd=Path("/tmp/w s"), binds=[Path("/work/tree"), Path("/tmp/a")],
                     drive_c=True)
    assert argv[:5] == ["/usr/bin/unshare", "--mount", "--propagation", "private", "--"]
    chroot, cwd, *rest = argv[9:]
    assert (chroot, cwd) == ("/c/turn-memory/windows-v1/trixie", "/c/turn-memory/windows-v1/prefix/drive_c/tmp/w s")
    mounts, program = rest[:rest.index("--")], rest[rest.index("--") + 1:]
    c = "/c/turn-memory/windows-v1/trixie/c/turn-memory/windows-v1/prefix/drive_c"
    # own paths first (the cache holds drive C:), then the same folders on C:; /tmp/a lies in /tmp
    assert list(zip(mounts[::2], mounts[1::2])) == [
        ("/tmp", "/c/turn-memory/windows-v1/trixie/tmp"), ("/c/turn-memory", "/c/turn-memory/windows-v1/trixie/c/turn-memory"),
        ("/work/tree", "/c/turn-memory/windows-v1/trixie/work/tree"),
        ("/tmp", f"{c}/tmp"), ("/c/turn-memory", f"{c}/c/turn-memory"), ("/work/tree", f"{c}/work/tree")]
    assert program == ["wine", "Z:\\x\\dsh.exe", "--version"]
