"""`turn-memory eval`: does the agent still know what it did? Probe scores, side by side.

Replays a fixed suite of recorded coding sessions through a real DSH host (0.2.1-rc.2 by
default, `--host rc8`), once with stock compaction-basic and once with turn-memory, then
asks each scenario's probe questions (recall, artifact trail, continuation, decision)
against the memory each engine left and has a judge score the answers 0-5. The agent's
side comes from the recordings; turn and session workers, thought hints, stock's summary,
the probe answers and the judge go to your provider (any OpenAI-compatible endpoint;
DeepSeek by default, key from DEEPSEEK_API_KEY; a local endpoint needs none). The scores
that compare the engines are answered from memory, with no tool; turn-memory's answers with
its history search are reported apart. `--estimate` prints what a run would cost, in two
parts: turn-memory's own work and the evaluation's. `--model scripted` runs it all on the
embedded scripted model: no key, no cost, exact numbers that check the machinery only.

"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from turn_memory import __version__
from turn_memory.cli_output import EXIT_FAILED, EXIT_USAGE, error_text, render as render_command
from turn_memory.config import ConfigError, EngineConfig, check_config
from turn_memory.devtools.runtime import HOSTS, ensure_runtime
from turn_memory.eval.cost import EVALUATION, PARTS, TURN_MEMORY as TM_PART, Estimate, estimate
from turn_memory.eval.dry_run import check
from turn_memory.eval.provider import (DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, LOCAL_KEY, OpenAIProvider, Provider,
                                       ProviderDown, is_local, unreachable)
from turn_memory.eval.report import render, result_json
from turn_memory.eval.scenario import SHIPPED_DIR, ScenarioError, UnknownScenario, load_suite
from turn_memory.eval.scripted import ScriptedProvider
from turn_memory.eval.session_run import ENGINES, RunFailed
from turn_memory.eval.suite import DEFAULT_ORDER, ENGINE_ORDERS, SuiteRun
from turn_memory.install.installer import InstallError, parse_sets

PROG = "turn-memory eval"
EPILOG = """\
exit status: 0 every run finished cleanly; 1 a run reported a problem (listed in the report),
no DSH host could be set up, or the provider cannot be reached or refuses the key (the run
stops at its first such request); 2 bad usage (a bad --set, scenario file or key), or a paid
run no one confirmed; 130 Ctrl-C (what was measured so far is still printed)."""
SCRIPTED = "scripted"
DEFAULT_BASE_URL = "https://api.deepseek.com"
DEFAULT_MODEL = "deepseek-chat"


class UsageError(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def _error(message: str, fix: str | None = None, code: int = EXIT_USAGE) -> int:
    print(error_text("eval", message, fix), file=sys.stderr)
    return code


def make_provider(args: argparse.Namespace) -> Provider:
    if args.model == SCRIPTED:
        if args.judge_model not in (None, SCRIPTED):
            raise UsageError("--judge-model needs a real --model", "leave --judge-model out with --model scripted")
        return ScriptedProvider()
    key = os.environ.get(args.api_key_env, "") or (LOCAL_KEY if is_local(args.base_url) else "")
    if not key:
        raise UsageError(f"no API key: ${args.api_key_env} is not set",
                         f"export {args.api_key_env}=<your key>, name another variable with --api-key-env, "
                         "or try --model scripted")
    return OpenAIProvider(args.base_url, key, args.model, args.judge_model or args.model, images=args.provider_images,
                          timeout_s=args.request_timeout, retries=args.retries)


def run_config(settings: list[str]) -> EngineConfig:
    """The run's turn-memory config as `--set` makes it (the estimate and the probes' reads use it);
    the defaults when it is not valid: the installer then refuses it, in its own words."""
    try:
        return check_config(parse_sets(settings))
    except (InstallError, ConfigError):
        return EngineConfig()


def check_scenarios(scenarios: list) -> int:
    """`--check`: run each scenario's commands without DSH or a model and report what a run would miss."""
    status = 0
    for s in scenarios:
        found = check(s)
        problems = [f"fact {f.id} is not in turn {f.turn}'s output or messages" for f in found.missing] + found.too_large
        print(f"{s.name}: {len(s.turns)} turns, ~{found.raw_tokens:,} tokens of text (declared raw_tokens "
              f"{s.raw_tokens:,}), {len(s.facts) - len(found.missing)}/{len(s.facts)} facts planted"
              + "".join(f"\n    problem: {p}" for p in problems))
        status = status or (1 if problems else 0)
    return status


def estimate_line(bill: Estimate, scenarios: int, where: str) -> str:
    """The estimate, as printed before a paid run and by `--estimate`: its two parts, then the totals."""
    def part(name: str) -> str:
        expected, _ = bill.part(name)
        return f"{PARTS[name]}: about {expected.requests:,} requests, ${expected.cost():.2f}"

    expected, high = bill.expected, bill.high
    return (f"{scenarios} scenario(s) x 2 engines{where}: {part(TM_PART)}; {part(EVALUATION)}. In all about "
            f"${bill.cost():.2f} at DeepSeek list prices, {expected.requests:,} requests, {expected.prompt_tokens:,} "
            f"prompt tokens ({expected.hit_tokens:,} expected from the provider's cache), {expected.output_tokens:,} "
            f"output tokens, as the compression policy will handle these turns (at most ${bill.upper_bound():.2f}, "
            f"{high.requests:,} requests: a worker for every turn, no cache hits; a retried request is billed again)")


def confirm(args: argparse.Namespace, cost: float, upper: float, say: Callable[[str], None]) -> int | None:
    """None to go on; an exit status when the run must not start."""
    if args.yes:
        return None
    if not sys.stdin.isatty():
        return _error(f"this run would spend about ${cost:.2f} (at most ${upper:.2f}) at DeepSeek list prices "
                      "and no one confirmed it; nothing was run", "add --yes, or try --model scripted first")
    answer = input(f"{PROG}: run it for about ${cost:.2f} (at most ${upper:.2f})? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        say("nothing was run")
        return 0
    return None


def run_eval(args: argparse.Namespace) -> int:
    quiet, verbose = args.quiet, args.verbose and not args.quiet

    def say(line: str) -> None:
        if not quiet:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    try:
        scenarios = load_suite(Path(args.scenarios), args.scenario or None)
        if args.list:
            for s in scenarios:
                print(f"{s.name}: {s.title} — {len(s.turns)} turns, ~{s.raw_tokens:,} tokens raw, {len(s.facts)} facts, "
                      f"{len(s.probes)} probes\n    shape: {' '.join(s.shape.split())}")
            return 0
        if args.check:
            return check_scenarios(scenarios)
        if args.estimate:  # no key needed, nothing runs
            print(f"{PROG}: {estimate_line(estimate(scenarios, run_config(args.set or [])), len(scenarios), '')}")
            return 0
        provider = make_provider(args)
    except UnknownScenario as exc:
        listing = ["turn-memory", "eval", "--list"]
        if args.scenarios != str(SHIPPED_DIR):
            listing += ["--scenarios", args.scenarios]
        return _error(str(exc), render_command(listing))
    except ScenarioError as exc:
        return _error(str(exc), "correct the scenario file (format: docs/eval.md)")
    except UsageError as exc:
        return _error(str(exc), exc.fix)
    config = run_config(args.set or [])
    bill = estimate(scenarios, config)
    if provider.scripted:
        say(f"{len(scenarios)} scenario(s) on the scripted model: no key, no cost; it checks the machinery only, "
            "no figure is a memory score")
    else:
        # before anyone is asked to pay: a provider no request can reach stops here
        why = unreachable(args.base_url)
        if why is not None:
            return _error(f"cannot reach the provider at {args.base_url}: {why}; nothing was run",
                          "check --base-url, that the server runs and this machine can reach it; or try --model "
                          "scripted", EXIT_FAILED)
        print(f"{PROG}: {estimate_line(bill, len(scenarios), f' on {provider.label} at {args.base_url}')}",
              file=sys.stderr, flush=True)
        stop = confirm(args, bill.cost(), bill.upper_bound(), say)
        if stop is not None:
            return stop
    meta: dict[str, Any] = {"version": __version__, "model": provider.label, "scripted": provider.scripted,
                            "judge_model": None if provider.scripted else (args.judge_model or args.model),
                            "base_url": None if provider.scripted else args.base_url,
                            # a scripted run prices nothing, so it shows no estimate to compare with
                            "estimate": None if provider.scripted else bill.to_json()}
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="turn-memory-eval-"))
    suite = SuiteRun(provider, workdir, args.set or [], args.timeout, keep_logs=bool(args.workdir), say=say,
                     verbose=verbose, order=ENGINE_ORDERS[args.engine_order], config=config)
    status = 0
    try:
        runtime = ensure_runtime(host=args.host)
        meta["host"] = runtime.version
        say(f"DSH {runtime.version}; working in {workdir}")
        suite.run(scenarios, runtime)
        status = 1 if suite.failed else 0
    except RunFailed as exc:  # the turn-memory template: an install refused the --set values
        status = _error(str(exc), "check the --set values (turn-memory config lists every key)")
    except ProviderDown as exc:  # every later request would fail alike: one line, not one per request
        status = _error(f"the provider failed: {exc}; the run stopped at this first failed request"
                        + (f", during {suite.current}" if suite.current else ""), exc.fix, EXIT_FAILED)
        meta["stopped"] = f"the provider failed: {exc}"
    except RuntimeError as exc:  # no DSH host could be installed (no npm, no network)
        status = _error(f"cannot set up DSH {args.host}: {exc}", "see the message above; `./run test` sets the "
                                                                   "hosts up in a checkout", EXIT_FAILED)
    except KeyboardInterrupt:
        status = 130
        meta["interrupted"] = (f"during {suite.current}; the results above are complete runs" if suite.current
                               else "before the first scenario")
        say(f"interrupted {meta['interrupted']}; every DSH and engine process was stopped")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    results = [r for r in suite.results if len(r.engines) == len(ENGINES)]  # a scenario cut short compares nothing
    meta.setdefault("host", args.host)
    meta["engine_order"] = list(suite.order)
    meta["retried"] = dict(sorted(provider.retried.items()))
    out = result_json(results, meta)
    if "stopped" in meta and not results and not args.json:
        return status  # nothing was measured: the error line says it all
    try:
        print(json.dumps(out, indent=2) if args.json else render(out), flush=True)
    except BrokenPipeError:  # `eval … | head`: the reader left, which is fine
        sys.stderr.close()
    return status


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, got {text!r}")
    return int(text)


def add_eval_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="measure what the compressed memory keeps: probe scores vs stock compaction",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"the provider's model for workers, hints, stock's summary and probe answers "
                        f"(default {DEFAULT_MODEL}); 'scripted' runs the embedded scripted model: no key, no cost")
    p.add_argument("--judge-model", help="the model that scores the answers (default: --model)")
    p.add_argument("--base-url", default=DEFAULT_BASE_URL, help=f"OpenAI-compatible endpoint (default {DEFAULT_BASE_URL})")
    p.add_argument("--api-key-env", default="DEEPSEEK_API_KEY", metavar="VAR",
                   help="environment variable holding the API key (default DEEPSEEK_API_KEY)")
    p.add_argument("--provider-images", action="store_true",
                   help="send images to the provider as they are (default: a text note instead; DeepSeek takes text only)")
    p.add_argument("--host", choices=HOSTS, default="v021",
                   help="which real DSH replays the sessions: v021 = 0.2.1-rc.2 (default), rc8 = 0.1.0-rc.8")
    p.add_argument("--scenario", action="append", metavar="NAME", help="run only this scenario (repeatable)")
    p.add_argument("--scenarios", default=str(SHIPPED_DIR), metavar="DIR",
                   help="a folder of scenario folders, or one scenario folder (default: the shipped suite)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--estimate", action="store_true",
                   help="print what the run would cost at DeepSeek list prices (turn-memory's own work and the "
                        "evaluation's, apart) and exit: no key needed, nothing runs")
    p.add_argument("--check", action="store_true",
                   help="run the scenarios' recorded commands in a throwaway workspace (no DSH, no model) and report "
                        "every planted fact that is not where the scenario says; exit 1 if any")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="turn-memory config for the run, as `turn-memory install --set` takes it (repeatable)")
    p.add_argument("--yes", action="store_true", help="run against a paid provider without asking")
    p.add_argument("--workdir", metavar="DIR", help="keep the DSH homes, sessions and logs here (default: a temporary "
                                                    "folder, removed afterwards)")
    p.add_argument("--timeout", type=_positive, default=1800, metavar="SECONDS",
                   help="limit of one DSH replay (default 1800); DSH waits as long for any one model request")
    p.add_argument("--request-timeout", type=_positive, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"give up on a provider request after this long without a byte from it (default "
                        f"{DEFAULT_TIMEOUT_S:g}; a streamed answer may take longer while it keeps coming)")
    p.add_argument("--retries", type=_count, default=DEFAULT_RETRIES, metavar="N",
                   help=f"send a request that timed out, could not connect or got 408, 409, 429 or 5xx again, up to "
                        f"N times (default {DEFAULT_RETRIES}); a provider bills a retried request again if it had begun "
                        "it, and the reported usage counts only the attempt that answered")
    p.add_argument("--engine-order", choices=tuple(ENGINE_ORDERS), default=DEFAULT_ORDER, metavar="ORDER",
                   help=f"which engine's replay runs first: {' or '.join(ENGINE_ORDERS)} (default {DEFAULT_ORDER}: "
                        "a model that remembers, relayed or played by a person, then writes turn-memory's per-turn "
                        "memory before stock's summary request shows it the whole session); either way a scenario's "
                        "probes are asked after both replays, and judged after all its answers")
    p.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    level = p.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    level.add_argument("-v", "--verbose", action="store_true", help="also a line per probe with its score and the reason")
    p.set_defaults(func=run_eval)
