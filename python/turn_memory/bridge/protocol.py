"""The one wire protocol between the JS shim and the Python engine.

Every message is a ZeroMQ multipart: one JSON header frame (an `Envelope`), optionally
followed by one binary payload frame (JSON bytes) for anything large — event batches,
plan events — so the header stays small and cheap to route.

RPC is symmetric: the shim calls the engine (a hook fired, `/compact`), the engine calls
the shim (apply this plan, stream from the model, flush). Correlation is by `id`. A call
may receive `stream` messages before its `reply`; either side may `cancel` a call.
The shim validates nothing beyond the envelope: every method is declared here once.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter

PROTOCOL_VERSION: Final = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


#: DSH's ManualCompactionError codes
ManualCode = Literal["busy", "cancelled", "changed", "summary", "commit", "persistence"]


class ErrorInfo(_Model):
    code: str
    message: str
    #: set when the failure must surface as DSH's ManualCompactionError(code)
    manual: ManualCode | None = None
    #: a refused handshake (code `config`): the bad key, the nearest valid one, and how to fix it
    #: (`--profile NAME` stands for the profile, which the engine does not know)
    key: str | None = None
    nearest: str | None = None
    fix: str | None = None


# ---------------------------------------------------------------------------------------
# shim -> engine
# ---------------------------------------------------------------------------------------
class HostFacts(_Model):
    """What the shim found the host's own code to accept (shim-js/lib/host-probe.js)."""

    model_config = ConfigDict(extra="ignore")
    #: dsh-session's SESSION_FORMAT_VERSION (each dialect names its own)
    sessionFormatVersion: int | None = None
    #: replace-op key pairs a scratch session accepted, e.g. ["startSeq/endSeq"]; or the probe's error
    replaceKeys: list[str] | dict[str, Any] = Field(default_factory=list)


class HelloParams(_Model):
    protocol: int
    dshVersion: str
    #: a client that knows its dialect (doctor, tests) may name it (`host/dialects/`); the shim sends `host`
    dialect: str | None = None
    host: HostFacts | None = None
    secret: str
    pid: int
    #: what the host's own compactCheckpointSource('probe') returned: must match the dialect
    checkpointSource: dict[str, Any]
    #: the plugin row's whole config (the `engine` section with the shim's defaults filled in),
    #: validated by the engine against `turn_memory.config.EngineConfig`
    config: dict[str, Any] = Field(default_factory=dict)
    #: the DSH home (`$DSH_HOME`, else `~/.dsh`): where the engine keeps a finished turn's
    #: compression until it lands (`<home>/turn-memory/results/`); absent: kept nowhere
    dshHome: str | None = None


class ElideExcept(_Model):
    """An event of an elided type is still sent whole when its data at `path` equals `equals`."""

    type: str
    path: list[str]
    equals: Any


class ToolSpec(_Model):
    name: str
    description: str
    #: JSON Schema of the arguments object
    parameters: dict[str, Any]


class HelloResult(_Model):
    protocol: int
    engineVersion: str
    #: the dialect the engine speaks with this host (decided from the probe)
    dialect: str = ""
    #: event types whose data the shim may leave out of the mirror (the engine never reads it)
    elide: list[str] = Field(default_factory=list)
    #: the few events of those types the engine does read (a long thought's block-end: thought hints)
    elideExcept: list[ElideExcept] = Field(default_factory=list)
    #: do not mirror subagent sessions (the engine only works on user sessions)
    skipSubagents: bool = True
    #: how long the shim lets the engine hold a pre-step (its bounded waits, and a compaction)
    preStepTimeoutMs: int = 2000
    #: a later pre-step waits (bounded) for a booting engine: only worth it when the engine
    #: holds each turn's first request for the previous turn's landing (`turns.landingBarrier`)
    bootWait: bool = False
    #: public memory tools the shim registers on every user agent (calls come back as `tool.call`)
    publicTools: list[ToolSpec] = Field(default_factory=list)
    #: named runtime-context sections the shim registers on every user agent; their text is
    #: whatever the last `turn.preStep` answer said for that agent (empty = no section)
    contextSections: list[str] = Field(default_factory=list)
    #: how the host's runtime-context snapshot message is sourced ({field: value} matchers):
    #: workers must not see that host scaffolding
    snapshotSources: list[dict[str, str]] = Field(default_factory=list)
    #: the class of the engine's asyncio loop (`turn-memory doctor` reports it; the shim ignores it)
    eventLoop: str | None = None
    #: runtime-context sections a worker scope shadows: the host keeps them under its
    #: suppressor, and a worker's request carries no runtime context (docs/decisions.md#workers-are-isolated)
    workerShadowContexts: list[str] = Field(default_factory=list)
    #: the host projects the snapshot inside the step at the pre-step's snapshot slot (0.2.1):
    #: a worker keeps that slot ahead of its task instead of dropping it, so the task is last
    workerSnapshotFirst: bool = False


class AgentOptions(_Model):
    model_config = ConfigDict(extra="ignore")
    provider: str | None = None
    model: str | None = None


class CompactNowParams(_Model):
    sessionId: str
    logLength: int
    sourceCommandId: str | None = None
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class CompactRegionParams(_Model):
    sessionId: str
    logLength: int
    start: int
    end: int
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class CompactIfNeededParams(_Model):
    sessionId: str
    logLength: int
    trigger: Literal["pressure", "context-overflow"]
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class PreStepParams(_Model):
    """Before a step of `turn` starts (the agent waits for the answer, bounded)."""

    sessionId: str
    logLength: int
    turn: int
    step: int
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class WorkerToolParams(_Model):
    """A compression worker called one of its private tools."""

    jobId: str
    workerId: str
    tool: str
    #: as the model sent them: an object, or a raw string when they were not valid JSON
    args: Any = None


class ToolResult(_Model):
    """What a tool call (worker or public) returns to the model: the engine's one tool-result
    type, from the tool that answers to the wire (`ToolResult("…", is_error=True)`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    text: str
    is_error: bool = Field(False, alias="isError")
    #: the calling agent's turn ends with this result (an accepted finish, a hand-off)
    conclude: bool = False
    #: an ImageAttachmentRef the shim verifies through the attachment service and returns
    #: as an image block beside the text
    image: dict[str, Any] | None = None

    def __init__(self, text: str | None = None, /, **data: Any) -> None:
        super().__init__(**data if text is None else {"text": text, **data})


class PublicToolParams(_Model):
    """A user agent called one of turn-memory's public memory tools."""

    sessionId: str
    tool: str
    #: as the model sent them: an object, or a raw string when they were not valid JSON
    args: Any = None
    callId: str | None = None
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class PreStepResult(_Model):
    #: text of each of the hello's `contextSections` ('' = absent) until the next pre-step; rc8
    #: assembles a step's context before its pre-step, so it reaches the next request
    contexts: dict[str, str] = Field(default_factory=dict)
    #: call `turn.request` from this step's `agent/request` hook: a landing waits for the
    #: step the loop is about to open (0.2: assistant nodes may only land inside one)
    landAtRequest: bool = False
    #: ids of messages this step must not take in (an automatic continuation follow-up whose
    #: hand-off turn did not land compressed): the shim drops them from the step's input, and a
    #: first step left with nothing else ends the turn before any request
    withhold: list[str] = Field(default_factory=list)
    #: one plain line for DSH's output (the shim warns with it once), e.g. that compression stopped
    notice: str | None = None
    #: names of the hello's `publicTools` this agent's requests carry from this step's request
    #: on (the shim adds them to the step's assembled tool list and never drops one again);
    #: none until the session has something to read back or hand off (`catalog.carried_tools`)
    tools: list[str] = Field(default_factory=list)


class RequestParams(_Model):
    """0.2 `agent/request` of a step whose pre-step asked for it: the loop has appended the
    step's step/start but not yet its system prompt or the turn's user message."""

    sessionId: str
    logLength: int
    turn: int
    step: int


class RequestResult(_Model):
    #: as `PreStepResult.withhold`, for a landing this request was to carry and the host
    #: refused: the shim drops those messages from the step's input, and cancels the step
    #: (the turn ends aborted, before its model request) when only host context is left
    withhold: list[str] = Field(default_factory=list)
    #: as `PreStepResult.tools`, after this request's landing: the request carrying the first
    #: compressed turn carries the memory tools too (one cache break, not two)
    tools: list[str] = Field(default_factory=list)


class OverflowParams(_Model):
    """The provider reported CONTEXT_WINDOW_EXCEEDED for a request of `turn`."""

    sessionId: str
    logLength: int
    turn: int
    agentOptions: AgentOptions = Field(default_factory=AgentOptions)


class PingParams(_Model):
    echo: Any = None


class SessionMeta(_Model):
    model_config = ConfigDict(extra="ignore")
    parentSession: str | None = None
    origin: str | None = None
    delegationDepth: int | None = None
    #: the log length when this DSH process began watching the session: turns that end at
    #: or after it were observed live by the plugin, even if the engine was not connected yet
    liveFrom: int | None = None


class SessionEventsParams(_Model):
    """Payload frame: JSON array of committed events, seqs `start..start+count-1`."""

    sessionId: str
    start: int
    count: int
    #: true on agent/created and after a reconnect: the batch is the whole log from 0
    reset: bool = False
    meta: SessionMeta | None = None


class AgentStreamParams(_Model):
    """0.2.x live stream: one chunk frame of an agent's model output that an `elideExcept`
    rule matched (for hints: a reasoning block-end). 0.2 persists no chunk events."""

    sessionId: str
    turn: int
    step: int
    chunk: dict[str, Any]


class SessionClosedParams(_Model):
    sessionId: str


# ---------------------------------------------------------------------------------------
# engine -> shim
# ---------------------------------------------------------------------------------------
class Expectation(_Model):
    """Precondition the shim checks synchronously right before the first append."""

    logLength: int
    #: each span must still be a contiguous run of the current surface, in this order
    spans: list[list[int]] = Field(default_factory=list)


class ApplyParams(_Model):
    """Payload frame: JSON array of host-shaped `{type, data, surfaceOp?, sourceEventSeqs?}`."""

    sessionId: str
    expect: Expectation
    label: str = ""


#: why the shim appended nothing (or, append-threw, not everything): `shim-js/lib/host-ops.js`
ApplyRefusal = Literal["unknown-session", "log-moved", "span-moved", "append-threw"]


class ApplyResult(_Model):
    ok: bool
    seqs: list[int] = Field(default_factory=list)
    reason: ApplyRefusal | None = None
    logLength: int | None = None
    detail: str | None = None
    #: events appended before an append threw (a planning bug: reported, never hidden)
    appended: int = 0


class SeqRange(_Model):
    start: int
    end: int


class CompactionResult(_Model):
    """A committed compaction, as DSH's compaction seam returns it (`compact.*`'s reply)."""

    compactionId: str
    #: the `/compact` command it answers (omitted on the wire for automatic ones)
    sourceCommandId: str | None = None
    startSeq: int
    summarySeq: int
    endSeq: int
    summary: list[dict[str, Any]]
    shadowedRange: SeqRange
    shadowedSeqs: list[int]
    shadowedTokenCount: int


class CompactSkipped(_Model):
    """`/compact` found the older history too small to fold: nothing changed (the shim logs why)."""

    skipped: str


class OverflowResult(_Model):
    """`compact.overflow`'s reply: whether DSH should replay the request once."""

    retry: bool


class LlmRequest(_Model):
    model_config = ConfigDict(extra="allow")
    provider: str
    model: str
    messages: list[dict[str, Any]]
    system: str | None = None
    tools: list[dict[str, Any]] | None = None
    maxTokens: int | None = None
    purpose: Literal["compaction", "session-title"] | None = None


class LlmStreamParams(_Model):
    sessionId: str
    request: LlmRequest
    #: attach the session's toolHistory(), as DSH's own summarizer does
    withToolHistory: bool = True


class WorkerRunParams(_Model):
    """Run one compression worker (fork or spawn of the session's agent) until it ends."""

    sessionId: str
    jobId: str
    workerId: str
    mode: Literal["fork", "spawn"]
    prompt: str
    persona: str
    #: [{name, description, parameters (JSON schema)}], registered in the worker's scope only
    tools: list[dict[str, Any]]
    maxRequests: int
    label: str = ""


class WorkerRunResult(_Model):
    """How a worker ended (`worker.run`'s reply, or the engine's account of one that failed to run)."""

    model_config = ConfigDict(extra="ignore")
    #: DSH's stop reason ("completed", "concluded", "request-limit", …; "error": it failed to run)
    stop: str | None = None
    #: model requests the worker made, as the shim counted them (None: it did not say)
    requests: int | None = None
    #: DSH's id of the child agent
    child: str | None = None
    #: milliseconds the host took to start the child (a fork's copy of the parent's log)
    startMs: float | None = None
    #: why a worker failed to run (a transport error, a timeout, a host refusal)
    detail: str | None = None


class MeasureParams(_Model):
    """DSH's token meter over a session: {totalTokens, nodes: [{seq, tokens}]} or {error}."""

    sessionId: str


class MeteredNode(_Model):
    model_config = ConfigDict(extra="ignore")
    seq: int
    tokens: int


class MeasureResult(_Model):
    """`session.measure`'s reply: the meter's total and each surface node's price, or why it failed."""

    model_config = ConfigDict(extra="ignore")
    totalTokens: int | None = None
    nodes: list[MeteredNode] = Field(default_factory=list)
    error: str | None = None


class FollowupParams(_Model):
    """Queue an ordinary follow-up turn on the session's agent (`Agent.followup`)."""

    sessionId: str
    #: the message id (the engine names it, so the follow-up can be found in the log)
    id: str
    content: list[dict[str, Any]]
    #: a `{kind: 'plugin', plugin: ...}` message source
    source: dict[str, Any]


class FlushParams(_Model):
    sessionId: str


class ResyncParams(_Model):
    """Ask the shim to resend a session's whole log (the mirror found a gap)."""

    sessionId: str


# ---------------------------------------------------------------------------------------
# envelopes
# ---------------------------------------------------------------------------------------
def _call(method: str, params: type[BaseModel]) -> Any:
    model = type(
        f"Call_{method.replace('.', '_')}",
        (_Model,),
        {
            "__annotations__": {
                "v": Literal[PROTOCOL_VERSION],
                "kind": Literal["call"],
                "id": str,
                "method": Literal[method],
                "params": params,
            }
        },
    )
    return Annotated[model, Tag(f"call:{method}")]


def _notify(method: str, params: type[BaseModel]) -> Any:
    model = type(
        f"Notify_{method.replace('.', '_')}",
        (_Model,),
        {
            "__annotations__": {
                "v": Literal[PROTOCOL_VERSION],
                "kind": Literal["notify"],
                "method": Literal[method],
                "params": params,
            }
        },
    )
    return Annotated[model, Tag(f"notify:{method}")]


class Reply(_Model):
    v: Literal[1] = PROTOCOL_VERSION
    kind: Literal["reply"] = "reply"
    id: str
    result: Any = None
    error: ErrorInfo | None = None


class Stream(_Model):
    v: Literal[1] = PROTOCOL_VERSION
    kind: Literal["stream"] = "stream"
    id: str
    params: dict[str, Any]


class Cancel(_Model):
    v: Literal[1] = PROTOCOL_VERSION
    kind: Literal["cancel"] = "cancel"
    id: str


def _tag(value: Any) -> str:
    if isinstance(value, dict):
        kind, method = value.get("kind"), value.get("method")
    else:
        kind, method = getattr(value, "kind", None), getattr(value, "method", None)
    return f"{kind}:{method}" if kind in ("call", "notify") else str(kind)


#: what the engine may receive from the shim (a union built at run time from the method
#: table: the checker sees it as Any, pydantic validates every member)
ShimMessage: Any = Annotated[
    Union[
        _call("hello", HelloParams),
        _call("ping", PingParams),
        _call("compact.now", CompactNowParams),
        _call("compact.region", CompactRegionParams),
        _call("compact.ifNeeded", CompactIfNeededParams),
        _call("turn.preStep", PreStepParams),
        _call("turn.request", RequestParams),
        _call("worker.tool", WorkerToolParams),
        _call("tool.call", PublicToolParams),
        _call("compact.overflow", OverflowParams),
        _notify("session.events", SessionEventsParams),
        _notify("session.closed", SessionClosedParams),
        _notify("agent.stream", AgentStreamParams),
        Annotated[Reply, Tag("reply")],
        Annotated[Stream, Tag("stream")],
        Annotated[Cancel, Tag("cancel")],
    ],
    Discriminator(_tag),
]

SHIM_MESSAGE: TypeAdapter[Any] = TypeAdapter(ShimMessage)

#: engine -> shim calls: method name -> params model (the shim executes these)
ENGINE_CALLS: dict[str, type[BaseModel]] = {
    "session.apply": ApplyParams,
    "llm.stream": LlmStreamParams,
    "session.flush": FlushParams,
    "session.resync": ResyncParams,
    "worker.run": WorkerRunParams,
    "session.measure": MeasureParams,
    "agent.followup": FollowupParams,
}
