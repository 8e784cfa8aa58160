"""The install / uninstall flows. I/O lives here; decisions live in layout/patchfile/compose.

install:  resolve home, profile, dsh -> pack the shim -> `dsh plugin add <tgz>` (skipped when the
          identical tarball is already installed) -> composed tree without our block -> classify
          -> write the managed block (backup first) -> `--dump-config` again -> verify -> report.
          A failed verification restores the patch file and removes a plugin this run added.
uninstall: remove the managed block -> `dsh plugin remove dsh-turn-memory` (if present)
          -> `--dump-config` -> verify compaction-basic is live again -> report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from glob import escape as glob_escape
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from turn_memory import resources
from turn_memory.cli_output import EXIT_USAGE, error_text
from turn_memory.config import config_keys, config_problems
from turn_memory.files import FILES, FileOps

from . import layout as L
from .build_rules import PACKAGE as BUILD_RULE_PACKAGE, with_zeromq_rule
from .compose import apply_entry_patches
from .fix_commands import Invocation
from .node_check import node_problem, windows_node, wrapper_node
from .pack import PackError, PackResult, pack_shim
from .patchfile import PatchFileError, remove_block, split_block, user_entries, with_block
from .patchyaml import load_entry_list
from .profile import (
    RECORDED,
    SHIPPED_PROFILES,
    Dsh,
    DshError,
    DshLocation,
    LocateError,
    ProfilePaths,
    Runner,
    default_runner,
    list_profiles,
    nearest_profile,
    resolve_dsh,
    resolve_home,
    tail,
)
from .recorded import record_dsh, recorded_dsh, state_file
from .row_config import Merged, installed_config, leaves, merge_config, show, typed_values, unknown_unsets

TEMPLATE_FILES = {"bundle": "bundle-layout.yml", "preset": "preset-layout.yml"}
#: the --json report of install and uninstall; fields are only ever added within version 1
SCHEMA = "turn-memory.install/1"
#: DSH's composed config after writing is not what was planned (everything rolled back); 2 is bad usage
EXIT_VERIFY = 3


def default_engine_command() -> list[str]:
    return [str(Path(sys.executable).absolute()), "-m", "turn_memory", "serve"]


@dataclass
class Options:
    profile: str
    dsh_home: str | None = None
    desktop: str | None = None
    dsh: str | None = None
    shim_dir: Path | None = None
    templates_dir: Path | None = None
    extra_config: dict[str, Any] = field(default_factory=dict)
    #: dotted keys to remove from the installed row's config
    unset: list[str] = field(default_factory=list)
    #: write the row from this run's options only (the installed row's other keys are dropped)
    replace_config: bool = False
    engine_command: list[str] | None = None
    dry_run: bool = False
    force_plugin: bool = False
    env: Mapping[str, str] | None = None
    runner: Runner | None = None
    out: Callable[[str], None] = print
    #: where an error goes, as (message, fix); default: one line in `out`
    err: Callable[[str, str | None], None] | None = None
    #: --quiet: only the verdict and errors; --verbose: every detail
    quiet: bool = False
    verbose: bool = False
    #: print the report as one JSON object (SCHEMA) instead of lines
    json: bool = False
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
    #: the system this runs on (sys.platform; injected by tests)
    platform: str = sys.platform

    def fail(self, command: str, message: str, fix: str | None) -> None:
        if self.err is not None:
            self.err(message, fix)
        else:
            self.out(error_text(command, message, fix))

    @property
    def invocation(self) -> Invocation:
        return Invocation(self.profile, self.dsh_home, self.dsh, self.desktop)

    def own_flags(self) -> list[str]:
        """This run's options other than the location and the config, for a fix to repeat."""
        flags = ["--dry-run"] if self.dry_run else []
        flags += ["--replace-config"] if self.replace_config else []
        flags += ["--shim-dir", str(self.shim_dir)] if self.shim_dir else []
        return flags + (["--force-plugin"] if self.force_plugin else [])


class InstallError(Exception):
    """A failure with a message meant for the user: exit code, and the command that fixes it."""

    def __init__(self, message: str, code: int = 1, fix: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.fix = fix


def _resolve(opts: Options, command: str) -> Context:
    env = dict(opts.env if opts.env is not None else os.environ)
    home = resolve_home(opts.dsh_home, env, opts.desktop)
    try:
        recorded = None if opts.dsh or opts.desktop else recorded_dsh(home, opts.profile)
        location: DshLocation = resolve_dsh(opts.dsh, opts.desktop, home, recorded=recorded)
    except LocateError as err:
        raise InstallError(str(err), fix=_dsh_fix(opts, command, err.suggest)) from err
    # a path someone typed (or an install recorded): is it DSH at all? asked before its first real call
    dsh = Dsh(location, home, env, opts.runner or default_runner, calls=[], verify=location.how in ("--dsh", RECORDED))
    return Context(opts, ProfilePaths(home, opts.profile), dsh, Backups(opts.now().strftime("%Y%m%dT%H%M%SZ")))


def _dsh_fix(opts: Options, command: str, suggest: str | None) -> str | None:
    """This very command with the dsh program a folder held, or the step that finds one (none
    given: the error names the ways)."""
    if suggest is None:
        return ("pass --dsh the dsh program itself (`turn-memory doctor` names the one the demo cached), "
                "or put dsh on PATH") if opts.dsh else None
    inv = replace(opts.invocation, dsh=suggest)
    options = [*opts.own_flags(), *_config_options(opts)] if command == "install" else opts.own_flags()
    return inv.command(command, *options)


# ---- small I/O helpers ----------------------------------------------------------------------


def read_text(path: Path) -> str | None:
    try:
        # bytes -> str keeps CRLF and a BOM exactly as they are on disk.
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as err:
        # DSH reads these files as UTF-8; editing another encoding would corrupt it.
        raise InstallError(f"{path} is not UTF-8 ({err}); DSH reads it as UTF-8, save it as UTF-8 first") from err


def write_text(path: Path, text: str, files: FileOps = FILES) -> None:
    """Whole or not at all; on Windows retried while a scanner or editor holds the file open."""
    files.write(path, text.encode("utf-8"))


class Backups:
    """One timestamped copy per file per run, taken right before the first edit; the copies
    earlier runs left of that file go then (one per change would pile up: the last one is kept)."""

    def __init__(self, stamp: str) -> None:
        self.stamp = stamp
        self.made: dict[Path, Path | None] = {}  # None: the file did not exist

    def before_edit(self, path: Path) -> None:
        if path in self.made:
            return
        if not path.exists():
            self.made[path] = None
            return
        backup = path.with_name(f"{path.name}.turn-memory-{self.stamp}.bak")
        n = 1
        while backup.exists():
            backup = path.with_name(f"{path.name}.turn-memory-{self.stamp}-{n}.bak")
            n += 1
        shutil.copy2(path, backup)
        self.made[path] = backup
        for older in path.parent.glob(f"{glob_escape(path.name)}.turn-memory-*.bak"):
            if older != backup:
                FILES.unlink(older, missing_ok=True)

    def restore(self, path: Path) -> str:
        if path not in self.made:
            return f"{path.name}: not edited"
        backup = self.made[path]
        if backup is None:
            path.unlink(missing_ok=True)
            return f"{path}: removed (did not exist before)"
        shutil.copy2(backup, path)
        return f"{path}: restored from {backup.name}"

    def lines(self) -> list[str]:
        return [f"{p}  (backup: {b.name})" if b else f"{p}  (new file)" for p, b in self.made.items()]


@dataclass
class Context:
    opts: Options
    paths: ProfilePaths
    dsh: Dsh
    backups: Backups
    #: the --json report, filled in as the flow goes (SCHEMA)
    report: dict[str, Any] = field(default_factory=dict)

    def say(self, line: str = "") -> None:
        if not (self.opts.quiet or self.opts.json):
            self.opts.out(line)

    def detail(self, line: str = "") -> None:
        if self.opts.verbose and not self.opts.json:
            self.opts.out(line)

    def verdict(self, line: str) -> None:
        self.report["verdict"] = line
        if not self.opts.json:
            self.opts.out(line)


def parse_tree(text: str, what: str) -> list[dict[str, Any]]:
    try:
        return load_entry_list(text, what=what)
    except Exception as err:  # noqa: BLE001 - YAML errors come in many classes
        raise InstallError(f"cannot parse {what}: {err}") from err


@dataclass(frozen=True)
class PluginState:
    spec: str | None  # the dependency spec in the profile's package.json
    installed_version: str | None  # version in the profile's node_modules


def plugin_state(paths: ProfilePaths) -> PluginState:
    spec = None
    try:
        manifest = json.loads(paths.package_json.read_text(encoding="utf-8"))
        spec = (manifest.get("dependencies") or {}).get(L.OUR_PACKAGE)
    except (OSError, ValueError):
        pass
    version = None
    try:
        installed = json.loads((paths.dir / "node_modules" / L.OUR_PACKAGE / "package.json").read_text(encoding="utf-8"))
        version = installed.get("version")
    except (OSError, ValueError):
        pass
    return PluginState(spec, version)


def home_patches(paths: ProfilePaths) -> list[dict[str, Any]]:
    text = read_text(paths.home_patch_file)
    return [] if text is None else parse_tree(text, str(paths.home_patch_file))


def tree_without_block(ctx: Context, user_text: str, has_block: bool, *, may_write: bool) -> tuple[list[dict[str, Any]], str]:
    """The composed tree as it is without our managed block, and how it was obtained.

    Without a block that is simply `--dump-config`. With one, recompose without
    touching the file (a running DSH hot-reloads it): the bundle layers from
    `--dump-default-config`, then the user's own entries and the home layer,
    through the same patch algorithm. Fallback for a dsh lacking that flag:
    write the file without the block (backed up) and dump.
    """
    profile = ctx.opts.profile
    if not has_block:
        return parse_tree(ctx.dsh.dump_config(profile).stdout, "dsh --dump-config output"), "dsh --dump-config"
    try:
        default = parse_tree(ctx.dsh.dump_config(profile, default_only=True).stdout, "dsh --dump-default-config output")
    except DshError as err:
        if not may_write:
            raise InstallError(f"cannot compose the profile without the managed block: {err}") from err
        return _tree_by_rewrite(ctx, user_text), "dsh --dump-config with the managed block removed first"
    tree, warnings = apply_entry_patches(default, user_entries(user_text) + home_patches(ctx.paths))
    for warning in warnings:
        ctx.say(f"  note: your patch layer: {warning}")
    return tree, "dsh --dump-default-config + your own patch entries (managed block left out)"


def _tree_by_rewrite(ctx: Context, user_text: str) -> list[dict[str, Any]]:
    text = read_text(ctx.paths.patch_file) or ""
    ctx.backups.before_edit(ctx.paths.patch_file)
    write_text(ctx.paths.patch_file, remove_block(text))
    return parse_tree(ctx.dsh.dump_config(ctx.opts.profile).stdout, "dsh --dump-config output")


def load_template(opts: Options, kind: str) -> L.Template:
    directory = opts.templates_dir or resources.profile_patch_dir()
    path = directory / TEMPLATE_FILES[kind]
    text = read_text(path)
    if text is None:
        raise InstallError(f"managed-block template missing: {path}")
    return L.parse_template(text)


def _header(ctx: Context, title: str) -> None:
    p = ctx.paths
    ctx.say(f"turn-memory {title} -- profile {p.name!r}")
    ctx.say(f"  DSH home : {p.home}")
    ctx.say(f"  profile  : {p.dir}")
    ctx.say(f"  dsh      : {ctx.dsh.location.path}  (found via {ctx.dsh.location.how})")


def _ensure_profile(ctx: Context) -> None:
    if ctx.paths.package_json.exists():
        return
    if ctx.opts.dry_run:
        raise _missing_profile(ctx, "a dry run does not ask dsh to create it")
    # dsh initialises a profile (from its template for built-in names) on first use.
    ctx.say("  profile not initialised yet; letting dsh create it")
    try:
        ctx.dsh.dump_config(ctx.opts.profile)
    except DshError as err:
        said = next((line.strip() for line in (err.result.stderr if err.result else str(err)).splitlines()
                     if line.strip().startswith("Error:")), str(err)[-300:])
        raise _missing_profile(ctx, f"dsh did not create it ({said})") from err
    if not ctx.paths.package_json.exists():
        raise _missing_profile(ctx, "dsh did not create it")


def _missing_profile(ctx: Context, why: str) -> InstallError:
    """No such profile: say which exist, how one is created, and the command to run instead."""
    opts, name = ctx.opts, ctx.paths.name
    found = [p for p in list_profiles(ctx.paths.home) if p != name]
    listed = f"profiles there: {', '.join(found)}" if found else "it holds no profile yet"
    if opts.dry_run and name in SHIPPED_PROFILES:
        fix = opts.invocation.install(*[f for f in opts.own_flags() if f != "--dry-run"], *_config_options(opts))
        how = f"install without --dry-run lets dsh create its shipped {name!r} profile first"
    else:
        other = nearest_profile(name, found) or (found[0] if found else "headless")
        fix = opts.invocation.install(*opts.own_flags(), *_config_options(opts), profile=other)
        how = (f"dsh creates only the profiles it ships ({', '.join(SHIPPED_PROFILES)}) on first use; create "
               f"your own with `dsh plugin --profile {name} add <package>`, or install into {other!r}")
    return InstallError(f"profile {name!r} does not exist in {ctx.paths.home / 'profiles'} ({listed}); {why}; {how}",
                        fix=fix)


def _node_problem(ctx: Context) -> str | None:
    """Why `dsh plugin add` (pnpm) could not run: the node it runs on, checked like doctor does
    (a Windows DSH: what it runs pnpm with, never this machine's node when it is not Windows)."""
    if ctx.dsh.location.is_desktop_wrapper:
        return None
    windows = windows_node(ctx.dsh.location.path, ctx.opts.platform)
    if windows is not None:
        return windows.hint
    node = wrapper_node(ctx.dsh.location.path) or Path("node")
    try:
        result = ctx.dsh.runner(node, ["--version"], dict(ctx.dsh.env), None, 30)
    except (OSError, LocateError, subprocess.SubprocessError):
        return node_problem(None)
    return node_problem(result.stdout if result.returncode == 0 else None)


def refuse_manifest_bom(paths: ProfilePaths) -> None:
    """DSH reads the profile's package.json with JSON.parse, which a UTF-8 byte order mark
    (Windows editors' "UTF-8 with BOM") breaks: say so before anything runs."""
    try:
        with open(paths.package_json, "rb") as manifest:
            head = manifest.read(3)
    except OSError:
        return
    if head == b"\xef\xbb\xbf":
        raise InstallError(f"{paths.package_json} starts with a UTF-8 byte order mark, which DSH cannot read "
                           "(JSON.parse); save it as UTF-8 without BOM and run this again; nothing was changed")


def _plugin_is_current(state: PluginState, pack: PackResult) -> bool:
    return (
        pack.unchanged
        and isinstance(state.spec, str)
        and state.spec.replace("\\", "/").endswith("/" + pack.path.name)
        and state.installed_version == pack.version
    )


# ---- install ------------------------------------------------------------------------------


_USER_ERRORS = (InstallError, PatchFileError, L.LayoutError, PackError, DshError, LocateError,
                resources.ResourceError)


def _run(opts: Options, command: str, flow: Callable[[Context], int]) -> int:
    """One flow with its errors in the one style; with --json the report as one object."""
    report: dict[str, Any] = {"schema": SCHEMA, "command": command, "profile": opts.profile, "dry_run": opts.dry_run,
                              "error": None}
    try:
        if command == "install":  # the command line's own config first, before any dsh is looked for
            env = opts.env if opts.env is not None else os.environ
            _merged(ProfilePaths(resolve_home(opts.dsh_home, env, opts.desktop), opts.profile), opts)
        ctx = _resolve(opts, command)
        ctx.report = report
        report.update(home=str(ctx.paths.home), dsh={"path": str(ctx.dsh.location.path), "how": ctx.dsh.location.how})
        code = flow(ctx)
    except _USER_ERRORS as err:
        fix = _dsh_fix(opts, command, err.suggest) if isinstance(err, LocateError) else getattr(err, "fix", None)
        opts.fail(command, str(err), fix)
        report["error"] = {"message": str(err), "fix": fix}
        code = getattr(err, "code", 1)
    report.update(exit=code, ok=code == 0)
    if opts.json:
        opts.out(json.dumps(report, indent=2, ensure_ascii=False))
    return code


def install(opts: Options) -> int:
    return _run(opts, "install", _install)


def _install(ctx: Context) -> int:
    opts, paths = ctx.opts, ctx.paths
    _header(ctx, "install" + (" (dry run)" if opts.dry_run else ""))
    command = opts.engine_command or default_engine_command()
    merged = _merged(paths, opts)  # checked by _run already; read again, as the row is now
    row = L.make_row(command, merged.config)
    _ensure_profile(ctx)
    refuse_manifest_bom(paths)
    shim_dir = opts.shim_dir or resources.shim_dir()
    text0 = read_text(paths.patch_file)
    user_text, old_block = split_block(text0 or "")
    user_entries(user_text)  # refuse an unparsable file before anything runs

    if opts.dry_run:
        packed = pack_shim(shim_dir, paths.tarball_dir, write=False)
        base, how = tree_without_block(ctx, user_text, old_block is not None, may_write=False)
        plan, new_text = _plan(ctx, base, row, text0)
        ctx.say(f"  tree     : {how}")
        if _plugin_is_current(plugin_state(paths), packed) and not opts.force_plugin:
            ctx.say(f"  plugin   : {L.OUR_PACKAGE}@{packed.version} already installed from this exact tarball; "
                    "would not run pnpm")
        else:
            ctx.say(f"  would pack {shim_dir} -> {packed.path}")
            ctx.say(f"  would run: dsh plugin --profile {paths.name} add {packed.path}")
        _say_config(ctx, merged)
        _say_plan(ctx, plan)
        ctx.report.update(patch_file=str(paths.patch_file), block=split_block(new_text)[1], would_change=new_text != text0)
        if new_text == text0:
            ctx.say(f"  {paths.patch_file}: already holds exactly this block (no change)")
        else:
            ctx.say(f"  would write this managed block to {paths.patch_file}:")
        ctx.say("")
        for line in (split_block(new_text)[1] or "").splitlines():
            ctx.say(line)
        ctx.verdict("dry run: nothing was changed")
        return 0

    backups = ctx.backups

    pack = pack_shim(shim_dir, paths.tarball_dir)
    ctx.say(f"  tarball  : {pack.path}  ({len(pack.files)} files, sha256 {pack.sha256[:12]}…, "
            f"{'unchanged' if pack.unchanged else 'written'})")
    before = plugin_state(paths)
    added_by_us = False
    if _plugin_is_current(before, pack) and not opts.force_plugin:
        ctx.say(f"  plugin   : {L.OUR_PACKAGE}@{pack.version} already installed from this exact tarball; pnpm not run")
    else:
        backups.before_edit(paths.package_json)
        backups.before_edit(paths.lock_file)
        _allow_shim_build_rule(ctx)
        started = time.monotonic()
        result = ctx.dsh.plugin(paths.name, "add", str(pack.path))
        elapsed = time.monotonic() - started
        if result.returncode != 0:
            hint = ""
            if paths.name == "desktop" and not ctx.dsh.location.is_desktop_wrapper:
                hint = " (the desktop profile can only be managed by DSH Desktop's dsh.cmd: pass --desktop)"
            elif problem := _node_problem(ctx):
                hint = f" ({problem})"
            raise InstallError(f"dsh plugin add failed ({result.returncode}){hint}: {tail(result, 600)}")
        added_by_us = before.spec is None
        after_state = plugin_state(paths)
        ctx.say(f"  plugin   : dsh plugin --profile {paths.name} add <tarball>: ok in {elapsed:.1f} s "
                f"(dependency {after_state.spec!r}, node_modules version {after_state.installed_version!r})")

    try:
        base, how = tree_without_block(ctx, user_text, old_block is not None, may_write=True)
        ctx.say(f"  tree     : {how}")
        plan, new_text = _plan(ctx, base, row, text0)
    except (InstallError, L.LayoutError, PatchFileError, DshError) as err:
        _rollback(ctx, backups, added_by_us)
        raise InstallError(f"{err}; rolled back", fix=getattr(err, "fix", None)) from err
    _say_config(ctx, merged)
    _say_plan(ctx, plan)

    if new_text != read_text(paths.patch_file):
        backups.before_edit(paths.patch_file)
        write_text(paths.patch_file, new_text)
        ctx.say(f"  wrote the managed block to {paths.patch_file}")
    else:
        ctx.say(f"  {paths.patch_file}: managed block already up to date (unchanged)")

    verdict = _verify(ctx, paths.name, backups, lambda after: L.verify_installed(after, plan.predicted, plan.layout))
    if not verdict.ok:
        ctx.verdict("verdict: FAILED -- rolling back")
        _rollback(ctx, backups, added_by_us)
        return EXIT_VERIFY
    _write_declarations(ctx, row)
    _record_dsh(ctx)
    ctx.verdict(f"verdict: installed -- {L.OUR_PACKAGE} is the only live compaction engine of profile "
                f"{paths.name!r} ({', '.join(plan.layout.locations)}); start a new DSH session to use it")
    return 0


def _record_dsh(ctx: Context) -> None:
    """Remember a --dsh for doctor, uninstall and the fixes they print (found otherwise: found so again)."""
    location = ctx.dsh.location
    if location.how == RECORDED:
        return
    record_dsh(ctx.paths.home, ctx.paths.name, str(location.path) if location.how == "--dsh" else None)
    if location.how == "--dsh":
        ctx.say(f"  dsh      : remembered for doctor and uninstall in {state_file(ctx.paths.home)}")


def _write_declarations(ctx: Context, row: dict[str, Any]) -> None:
    """Seed the shim's declarations cache with what the engine's handshake will declare.

    The shim registers the cached public tools as soon as an agent is created; without the
    cache, a fresh install's first DSH start sends its first requests without them and then
    changes the tool list, which breaks the provider's whole cached prompt prefix once.
    """
    from pydantic import ValidationError

    from turn_memory.config import EngineConfig
    from turn_memory.catalog import declarations_cache
    from turn_memory.prompts import PromptError

    path = ctx.paths.tarball_dir / L.DECLARED_CACHE
    try:
        config = EngineConfig.model_validate({k: v for k, v in row["config"].items() if k != "engine"})
        cache = declarations_cache(config)
    except (ValidationError, PromptError) as err:
        ctx.say(f"  declared : not written ({str(err).splitlines()[0]}); the first DSH start registers the "
                "memory tools after the engine's handshake")
        return
    # byte-identical to what the shim writes (JSON.stringify), so its first handshake changes nothing
    text = json.dumps(cache, ensure_ascii=False, separators=(",", ":"))
    if read_text(path) != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    ctx.say(f"  declared : {path} ({len(cache['publicTools'])} memory tools, registered from the first request)")


def _allow_shim_build_rule(ctx: Context) -> None:
    """pnpm 11 refuses unlisted dependency builds: name zeromq's (see build_rules)."""
    path = ctx.paths.workspace_file
    new = with_zeromq_rule(read_text(path))
    if new is None:
        return
    ctx.backups.before_edit(path)
    write_text(path, new)
    ctx.say(f"  pnpm     : {path.name}: allowBuilds.{BUILD_RULE_PACKAGE} = false (its prebuilt addon needs no build script)")


def _installed_row_config(paths: ProfilePaths, opts: Options) -> dict[str, Any] | None:
    """The config of the row the last install wrote (None: not installed)."""
    try:
        _, block = split_block(read_text(paths.patch_file) or "")
        return installed_config(block)
    except Exception as err:  # noqa: BLE001 - YAML errors come in many classes
        if opts.replace_config:
            return None  # nothing of it is kept anyway
        raise InstallError(f"cannot read the installed turn-memory row in {paths.patch_file}: {err}",
                           fix=opts.invocation.install(*opts.own_flags(), *_config_options(opts),
                                                       "--replace-config")) from err


def _merged(paths: ProfilePaths, opts: Options) -> Merged:
    """The row config this install writes, checked: a bad key or value is refused before anything
    else is looked at (even which dsh to run), so bad usage reads the same on any machine."""
    command = opts.engine_command or default_engine_command()
    merged = merge_config(_installed_row_config(paths, opts), command, opts.extra_config, opts.unset,
                          replace=opts.replace_config)
    check_unsets(merged, opts)
    check_row_config(merged, opts)
    return merged


def _config_options(opts: Options, *, drop: frozenset[str] = frozenset(), rename: Mapping[str, str] | None = None,
                    unset: Sequence[str] = (), sets: Sequence[str] = ()) -> list[str]:
    """This run's config as options (`--set` per given key, `--unset`), corrected for a fix."""
    out: list[str] = []
    for key, value in leaves(opts.extra_config).items():
        if key in drop:
            continue
        out += ["--set", f"{(rename or {}).get(key, key)}={show(value)}"]
    for key in [*opts.unset, *unset]:
        out += ["--unset", key]
    for pair in sets:
        out += ["--set", pair]
    return out


def check_row_config(merged: Merged, opts: Options) -> None:
    """Refuse a row config the engine would refuse at handshake, before anything is written.

    The fix is this very command, corrected: a misspelt key given now takes its nearest name;
    a bad value given now is left out; a bad key the installed row already holds is `--unset`.
    """
    problems = config_problems(merged.config)
    if not problems:
        return
    given = leaves(opts.extra_config)
    defaults = {k.name: k.default for k in config_keys()}
    drop: set[str] = set()
    rename: dict[str, str] = {}
    unset: list[str] = []
    sets: list[str] = []
    for p in problems:
        mine = [k for k in given if k == p.key or k.startswith(p.key + ".")] if p.key else list(given)
        if p.key and not mine:  # the installed row holds it: remove it, keep a misspelt value under its name
            unset.append(p.key)
            if p.nearest in defaults and not isinstance(p.value, (dict, list)):
                sets.append(f"{p.nearest}={show(p.value)}")
            continue
        if p.nearest in defaults and p.key in given:
            rename[p.key] = p.nearest
        else:
            drop.update(mine)
            if p.key in given and defaults.get(p.key) is not None:  # a bad value: the fix sets the default
                sets.append(f"{p.key}={show(defaults[p.key])}")
    fixed = opts.invocation.install(*opts.own_flags(), *_config_options(opts, drop=frozenset(drop), rename=rename,
                                                                        unset=unset, sets=sets))
    where = " in the installed row" if unset and not drop and not rename else ""
    # the command line's own keys are bad usage (2); a bad key only the installed row holds is a refusal (1)
    raise InstallError(f"invalid turn-memory config{where}: {'; '.join(p.message for p in problems)}; "
                       "nothing was changed", code=1 if where else EXIT_USAGE, fix=fixed)


def check_unsets(merged: Merged, opts: Options) -> None:
    """Refuse a misspelt `--unset` key (neither in the row nor a key at all), naming the nearest one."""
    wrong = unknown_unsets(merged)
    if not wrong:
        return
    nearest = dict(wrong)
    fixed = [nearest.get(u) or u for u in opts.unset if u not in nearest or nearest[u]]  # renamed, or left out
    said = "; ".join(f"--unset {key}: no such key" + (f" (did you mean {near}?)" if near else
                                                      " (`turn-memory config` lists every key)") for key, near in wrong)
    fix = opts.invocation.install(*opts.own_flags(), *_config_options(replace(opts, unset=fixed)))
    raise InstallError(f"{said}; nothing was changed", code=EXIT_USAGE, fix=fix)


def _plan(ctx: Context, base: list[dict[str, Any]], row: dict[str, Any], text0: str | None) -> tuple[L.Plan, str]:
    layout = L.classify(base)
    template = load_template(ctx.opts, layout.kind)
    plan = L.plan_install(base, layout, row, template)
    new_text = with_block(text0 or "", template.header, plan.entries)
    return plan, new_text


def _say_config(ctx: Context, merged: Merged) -> None:
    ctx.report["config"] = {"how": merged.how, "row": merged.config, "not_there": merged.not_there,
                            "changes": [{"key": c.key, "kind": c.kind, "old": c.old, "new": c.new}
                                        for c in merged.changes]}
    ctx.say(f"  config   : {merged.how}")
    for change in merged.changes:
        ctx.say(f"    {change.line()}")
    for key in merged.not_there:
        ctx.say(f"  note     : --unset {key}: the installed row does not set it (nothing to remove)")


def _say_plan(ctx: Context, plan: L.Plan) -> None:
    lay = plan.layout
    ctx.report.update(layout=lay.kind, changes=list(plan.changes))
    if isinstance(lay, L.BundleLayout):
        ctx.say("  layout   : bundle (compaction-basic is reachable by id)")
    else:
        ctx.say("  layout   : preset (the live engine sits inside a preset's object config)")
        for site in lay.host_engines:
            ctx.say(f"  note     : host-level {site.where} is also live; agents use the preset's engine, left as is")
    ctx.say("  changes  :")
    for change in plan.changes:
        ctx.say(f"    {change}")


def _verify(ctx: Context, profile: str, backups: Backups, check: Callable[[Any], L.Verdict]) -> L.Verdict:
    """Ask DSH for the composed config after writing, check it, and report files and verdict lines."""
    try:
        verdict = check(parse_tree(ctx.dsh.dump_config(profile).stdout, "dsh --dump-config output"))
    except (InstallError, DshError) as err:
        verdict = L.Verdict(False, (f"FAIL {err}",))
    _say_files(ctx, backups)
    ctx.report.update(verification=list(verdict.lines), warnings=list(verdict.warnings))
    ctx.say("  verification (dsh --dump-config after writing):")
    for line in verdict.lines:
        ctx.say(f"    {line}")
    for line in verdict.warnings:
        ctx.say(f"    warning: {line}")
    return verdict


def _say_files(ctx: Context, backups: Backups) -> None:
    ctx.report["files"] = [{"path": str(p), "backup": str(b) if b else None} for p, b in backups.made.items()]
    if backups.made:
        ctx.say("  files edited:")
        for line in backups.lines():
            ctx.say(f"    {line}")
    else:
        ctx.say("  files edited: none")


def _rollback(ctx: Context, backups: Backups, added_by_us: bool) -> None:
    paths = ctx.paths
    if paths.patch_file in backups.made:
        ctx.say(f"  rollback: {backups.restore(paths.patch_file)}")
    if added_by_us:
        result = ctx.dsh.plugin(paths.name, "remove", L.OUR_PACKAGE)
        state = "ok" if result.returncode == 0 else f"failed: {tail(result)}"
        ctx.say(f"  rollback: dsh plugin --profile {paths.name} remove {L.OUR_PACKAGE}: {state}")


# ---- uninstall ----------------------------------------------------------------------------


def uninstall(opts: Options) -> int:
    return _run(opts, "uninstall", _uninstall)


def _uninstall(ctx: Context) -> int:
    opts, paths = ctx.opts, ctx.paths
    _header(ctx, "uninstall" + (" (dry run)" if opts.dry_run else ""))
    if not paths.package_json.exists():
        found = list_profiles(paths.home)
        near = nearest_profile(paths.name, found)
        listed = f"profiles there: {', '.join(found)}" if found else "it holds no profile"
        raise InstallError(f"profile {paths.name!r} does not exist in {paths.home / 'profiles'} ({listed}); "
                           "nothing was changed" + (f" (did you mean {near!r}?)" if near else ""),
                           fix=opts.invocation.command("uninstall", *opts.own_flags(), profile=near) if near else
                           "name a profile that is there with --profile, or the DSH home that holds yours with "
                           "--dsh-home")
    refuse_manifest_bom(paths)
    text0 = read_text(paths.patch_file)
    user_text, block = split_block(text0 or "")
    state = plugin_state(paths)
    expected = None
    if block is not None:
        expected, how = tree_without_block(ctx, user_text, True, may_write=False)
        ctx.say(f"  expected : {how}")
    if opts.dry_run:
        ctx.say(f"  would remove the managed block from {paths.patch_file}" if block else "  no managed block")
        ctx.say(f"  would run: dsh plugin --profile {paths.name} remove {L.OUR_PACKAGE}" if state.spec else
                f"  {L.OUR_PACKAGE} is not a dependency of the profile")
        ctx.verdict("dry run: nothing was changed")
        return 0

    backups = ctx.backups
    problems = 0
    record_dsh(paths.home, paths.name, None)  # before the home's turn-memory folder is emptied
    if block is not None and text0 is not None:
        backups.before_edit(paths.patch_file)
        write_text(paths.patch_file, remove_block(text0))
        ctx.say(f"  removed the managed block from {paths.patch_file}")
    else:
        ctx.say("  no managed block in the patch file")
    if state.spec is not None:
        backups.before_edit(paths.package_json)
        backups.before_edit(paths.lock_file)
        result = ctx.dsh.plugin(paths.name, "remove", L.OUR_PACKAGE)
        if result.returncode == 0:
            ctx.say(f"  dsh plugin --profile {paths.name} remove {L.OUR_PACKAGE}: ok")
            for tgz in sorted(paths.tarball_dir.glob(f"{L.OUR_PACKAGE}-*.tgz")):
                FILES.unlink(tgz)
                ctx.say(f"  deleted {tgz}")
            FILES.unlink(paths.tarball_dir / L.DECLARED_CACHE, missing_ok=True)
            if paths.tarball_dir.is_dir() and not any(paths.tarball_dir.iterdir()):
                paths.tarball_dir.rmdir()
        else:
            problems += 1
            ctx.say(f"  dsh plugin remove failed ({result.returncode}): {tail(result)}")
    else:
        ctx.say(f"  {L.OUR_PACKAGE} is not a dependency of the profile (nothing for pnpm to remove)")

    verdict = _verify(ctx, paths.name, backups, lambda after: L.verify_uninstalled(after, expected))
    if not verdict.ok or problems:
        ctx.verdict("verdict: FAILED")
        return EXIT_VERIFY
    ctx.verdict(f"verdict: uninstalled -- the stock compaction engine is live again in profile {paths.name!r}")
    return 0


# ---- option parsing helpers used by the CLI -------------------------------------------------


def parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    """`--set a.b=value` pairs -> nested dict; values are read as YAML scalars (5000, true, text)."""
    from .patchyaml import load

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise InstallError(f"--set expects KEY=VALUE, got {pair!r}", code=EXIT_USAGE)
        value = load(raw) if raw.strip() else ""
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InstallError(f"--set {pair!r} conflicts with an earlier --set", code=EXIT_USAGE)
        node[parts[-1]] = value
    return typed_values(out)
