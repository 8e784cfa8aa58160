"""The commands that refusals and doctor findings print as their fix.

Each repeats the `--profile`, `--dsh-home`, `--dsh` and `--desktop` the user gave, exactly as
given, so it runs as printed in the same shell; it is quoted for that shell (POSIX `sh`, or
`cmd`/PowerShell's double quotes on Windows).
"""

from __future__ import annotations

from dataclasses import dataclass

from turn_memory.cli_output import render


@dataclass(frozen=True)
class Invocation:
    """Where the user pointed turn-memory: the flags every printed fix repeats."""

    profile: str | None = None
    dsh_home: str | None = None
    dsh: str | None = None
    desktop: str | None = None

    def where(self) -> list[str]:
        """The location flags as the user gave them (none given: none repeated)."""
        out: list[str] = []
        for flag, value in (("--dsh-home", self.dsh_home), ("--desktop", self.desktop), ("--dsh", self.dsh)):
            if value:
                out += [flag, value]
        return out

    def argv(self, command: str, *options: str, profile: str | None = None) -> list[str]:
        name = profile or self.profile
        return ["turn-memory", command, *(["--profile", name] if name else []), *self.where(), *options]

    def command(self, command: str, *options: str, profile: str | None = None) -> str:
        return render(self.argv(command, *options, profile=profile))

    def install(self, *options: str, profile: str | None = None) -> str:
        return self.command("install", *options, profile=profile)
