"""Automations as callers describe them: a graph of steps joined by typed connections, parsed
and checked once at the edge (pure, no I/O); whether a template or a segment exists is the
service's to ask (``references``).

A graph (docs/automations.md):

- ``steps``: 1-100 of ``{key, type, config}``; a key is 1-64 letters, digits, ``_`` or ``-``,
  unique in the graph. Exactly one step is the ``trigger``.
- ``connections``: ``{from, to, type?}`` (``type`` defaults to ``default``). Out of a
  ``condition`` go ``condition_met`` / ``condition_not_met``, out of a ``wait_for_event``
  ``event_received`` / ``timeout``, out of every other step ``default``; each at most once per
  step (a run follows one path). Nothing leads into the trigger.
- Every step is reachable from the trigger and no path comes back to a step (no cycles), so a
  run executes each step at most once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from posthaste.core.automation_configs import check_config, config_error
from posthaste.errors import ValidationError

MAX_STEPS = 100
MAX_CONNECTIONS = 200
MAX_NAME_LENGTH = 200
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


class StepType(StrEnum):
    TRIGGER = "trigger"
    SEND_EMAIL = "send_email"
    DELAY = "delay"
    WAIT_FOR_EVENT = "wait_for_event"
    CONDITION = "condition"
    CONTACT_UPDATE = "contact_update"
    CONTACT_DELETE = "contact_delete"
    ADD_TO_SEGMENT = "add_to_segment"
    REMOVE_FROM_SEGMENT = "remove_from_segment"


class ConnectionType(StrEnum):
    DEFAULT = "default"
    CONDITION_MET = "condition_met"
    CONDITION_NOT_MET = "condition_not_met"
    EVENT_RECEIVED = "event_received"
    TIMEOUT = "timeout"


class AutomationStatus(StrEnum):
    ENABLED = "enabled"
    DISABLED = "disabled"


# Which connections may leave a step of each type (every other type: ``default`` only).
BRANCHES: Mapping[StepType, tuple[ConnectionType, ...]] = {
    StepType.CONDITION: (ConnectionType.CONDITION_MET, ConnectionType.CONDITION_NOT_MET),
    StepType.WAIT_FOR_EVENT: (ConnectionType.EVENT_RECEIVED, ConnectionType.TIMEOUT),
}


def branches_of(step_type: StepType) -> tuple[ConnectionType, ...]:
    return BRANCHES.get(step_type, (ConnectionType.DEFAULT,))


@dataclass(frozen=True)
class Step:
    key: str
    type: StepType
    config: dict[str, Any]


@dataclass(frozen=True)
class Connection:
    from_: str
    to: str
    type: ConnectionType


@dataclass(frozen=True)
class Graph:
    """A checked graph: one trigger, every step reachable from it, no cycles."""

    steps: tuple[Step, ...]
    connections: tuple[Connection, ...]

    @property
    def trigger(self) -> Step:
        return next(s for s in self.steps if s.type is StepType.TRIGGER)

    @property
    def trigger_event(self) -> str:
        event: str = self.trigger.config["event"]
        return event

    def step(self, key: str) -> Step | None:
        return next((s for s in self.steps if s.key == key), None)

    def after(self, key: str, branch: ConnectionType) -> str | None:
        """The key of the step that ``branch`` out of ``key`` leads to; None: the run ends."""
        return next((c.to for c in self.connections if c.from_ == key and c.type is branch), None)

    def positions(self) -> dict[str, int]:
        """Each step's place in an order where every connection leads forward (there are no
        cycles): the steps a run executed, which follow connections, sort by it."""
        incoming = {s.key: 0 for s in self.steps}
        for c in self.connections:
            incoming[c.to] += 1
        ready = [key for key, count in incoming.items() if count == 0]
        placed: dict[str, int] = {}
        while ready:
            key = ready.pop(0)
            placed[key] = len(placed)
            for c in self.connections:
                if c.from_ == key:
                    incoming[c.to] -= 1
                    if incoming[c.to] == 0:
                        ready.append(c.to)
        return placed


@dataclass(frozen=True)
class References:
    """What a graph names that must exist in the team: templates (id or alias) and segments."""

    templates: tuple[tuple[str, str], ...]  # (step key, template ref)
    segments: tuple[tuple[str, str], ...]  # (step key, segment id)


def parse_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValidationError(f"'name' is required: 1-{MAX_NAME_LENGTH} characters.")
    return value.strip()


def parse_status(value: object) -> AutomationStatus:
    try:
        return AutomationStatus(str(value))
    except ValueError:
        raise ValidationError("'status' must be 'enabled' or 'disabled'.") from None


def parse_graph(steps: object, connections: object) -> Graph:
    """``steps`` and ``connections`` as a checked ``Graph``, or a 422 naming the problem."""
    parsed_steps = _steps(steps)
    graph = Graph(parsed_steps, _connections(connections, {s.key: s for s in parsed_steps}))
    _check_shape(graph)
    return graph


def references(graph: Graph) -> References:
    templates = tuple(
        (s.key, str(s.config["template"]))
        for s in graph.steps
        if s.type is StepType.SEND_EMAIL and s.config.get("template") is not None
    )
    segments = tuple(
        (s.key, str(s.config["segment_id"]))
        for s in graph.steps
        if s.type in (StepType.ADD_TO_SEGMENT, StepType.REMOVE_FROM_SEGMENT)
    )
    return References(templates, segments)


def graph_record(graph: Graph) -> dict[str, Any]:
    """The graph as the API shows it and as it is stored (``graph_from_record`` reads it back)."""
    return {
        "steps": [{"key": s.key, "type": s.type.value, "config": s.config} for s in graph.steps],
        "connections": [
            {"from": c.from_, "to": c.to, "type": c.type.value} for c in graph.connections
        ],
    }


def graph_from_record(record: Mapping[str, Any]) -> Graph:
    """A stored graph (checked when it was stored)."""
    return Graph(
        tuple(Step(s["key"], StepType(s["type"]), s["config"]) for s in record["steps"]),
        tuple(
            Connection(c["from"], c["to"], ConnectionType(c["type"])) for c in record["connections"]
        ),
    )


def _steps(value: object) -> tuple[Step, ...]:
    if not isinstance(value, list) or not value or len(value) > MAX_STEPS:
        raise ValidationError(f"'steps' must be an array of 1-{MAX_STEPS} steps.")
    steps: list[Step] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        step = _step(item, f"steps[{index}]")
        if step.key in seen:
            raise ValidationError(f"'steps[{index}].key' {step.key!r} is used by another step.")
        seen.add(step.key)
        steps.append(step)
    return tuple(steps)


def _step(item: object, where: str) -> Step:
    if not isinstance(item, dict):
        raise ValidationError(f"{where!r} must be an object {{key, type, config}}.")
    key = item.get("key")
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValidationError(f"'{where}.key' must be 1-64 letters, digits, '_' or '-'.")
    try:
        step_type = StepType(str(item.get("type")))
    except ValueError:
        known = ", ".join(t.value for t in StepType)
        raise ValidationError(f"'{where}.type' of step {key!r} must be one of: {known}.") from None
    config = item.get("config", {})
    if not isinstance(config, dict):
        raise ValidationError(f"'{where}.config' of step {key!r} must be an object.")
    try:
        return Step(key, step_type, check_config(step_type.value, config))
    except ValidationError as exc:
        raise config_error(key, step_type.value, exc) from None


def _connections(value: object, steps: Mapping[str, Step]) -> tuple[Connection, ...]:
    if value is None:
        value = []
    if not isinstance(value, list) or len(value) > MAX_CONNECTIONS:
        raise ValidationError(f"'connections' must be an array of at most {MAX_CONNECTIONS}.")
    found: list[Connection] = []
    for index, item in enumerate(value):
        connection = _connection(item, f"connections[{index}]", steps)
        if any(c.from_ == connection.from_ and c.type is connection.type for c in found):
            raise ValidationError(
                f"'connections[{index}]': step {connection.from_!r} already has a "
                f"{connection.type.value!r} connection; a run follows one path."
            )
        found.append(connection)
    return tuple(found)


def _connection(item: object, where: str, steps: Mapping[str, Step]) -> Connection:
    if not isinstance(item, dict):
        raise ValidationError(f"{where!r} must be an object {{from, to, type}}.")
    ends = []
    for end in ("from", "to"):
        key = item.get(end)
        if not isinstance(key, str) or key not in steps:
            raise ValidationError(f"'{where}.{end}' must be the key of one of the steps.")
        ends.append(key)
    source, target = ends
    branch = _branch(item.get("type"), where)
    allowed = branches_of(steps[source].type)
    if branch not in allowed:
        raise ValidationError(
            f"'{where}': a {steps[source].type.value} step ({source!r}) leads on with "
            f"{' or '.join(repr(b.value) for b in allowed)}, not {branch.value!r}."
        )
    if steps[target].type is StepType.TRIGGER:
        raise ValidationError(f"'{where}': nothing may lead into the trigger {target!r}.")
    return Connection(source, target, branch)


def _branch(given: object, where: str) -> ConnectionType:
    """A connection's type: left out or null is ``default``; else the name of a branch."""
    if given is None:
        return ConnectionType.DEFAULT
    if isinstance(given, str) and given in ConnectionType._value2member_map_:
        return ConnectionType(given)
    raise ValidationError(
        f"'{where}.type' must be one of: {', '.join(t.value for t in ConnectionType)}."
    )


def _check_shape(graph: Graph) -> None:
    triggers = [s.key for s in graph.steps if s.type is StepType.TRIGGER]
    if len(triggers) != 1:
        raise ValidationError(
            f"An automation has exactly one 'trigger' step; this one has {len(triggers)}."
        )
    _check_acyclic(graph)
    reached = _reachable(graph, triggers[0])
    unreached = [s.key for s in graph.steps if s.key not in reached]
    if unreached:
        raise ValidationError(
            f"Step {unreached[0]!r} is not reachable from the trigger; connect it or remove it."
        )


def _reachable(graph: Graph, start: str) -> set[str]:
    reached, pending = {start}, [start]
    while pending:
        key = pending.pop()
        for c in graph.connections:
            if c.from_ == key and c.to not in reached:
                reached.add(c.to)
                pending.append(c.to)
    return reached


def _check_acyclic(graph: Graph) -> None:
    """Kahn's algorithm: steps left over once every step without an incoming connection is
    peeled off lie on a cycle."""
    incoming = {s.key: 0 for s in graph.steps}
    for c in graph.connections:
        incoming[c.to] += 1
    ready = [key for key, count in incoming.items() if count == 0]
    while ready:
        key = ready.pop()
        for c in graph.connections:
            if c.from_ == key:
                incoming[c.to] -= 1
                if incoming[c.to] == 0:
                    ready.append(c.to)
    left = {key for key, count in incoming.items() if count > 0}
    if left:
        raise ValidationError(
            f"The connections form a cycle through step {_on_cycle(graph, left)!r}; a run may "
            "not come back to a step."
        )


def _on_cycle(graph: Graph, left: set[str]) -> str:
    """A step on a cycle: every step left over has a predecessor left over, so walking back
    through them comes round to a step already seen."""
    seen: list[str] = []
    key = min(left)
    while key not in seen:
        seen.append(key)
        key = min(c.from_ for c in graph.connections if c.to == key and c.from_ in left)
    return key


@dataclass(frozen=True)
class NewAutomation:
    """``POST /automations``: every field checked (``status`` defaults to disabled, as
    Resend's)."""

    name: str
    status: AutomationStatus
    graph: Graph


@dataclass(frozen=True)
class AutomationChanges:
    """``PATCH /automations/{id}``: what the body gives (None: unchanged); a new graph is a
    new version."""

    name: str | None = None
    status: AutomationStatus | None = None
    graph: Graph | None = None


def parse_new_automation(body: Mapping[str, Any]) -> NewAutomation:
    status = body.get("status")
    return NewAutomation(
        name=parse_name(body.get("name")),
        status=AutomationStatus.DISABLED if status is None else parse_status(status),
        graph=parse_graph(body.get("steps"), body.get("connections")),
    )


def parse_automation_changes(body: Mapping[str, Any]) -> AutomationChanges:
    has_steps, has_connections = "steps" in body, "connections" in body
    if has_connections and not has_steps:
        raise ValidationError("Give 'steps' with 'connections': together they are the graph.")
    return AutomationChanges(
        name=parse_name(body["name"]) if "name" in body else None,
        status=parse_status(body["status"]) if "status" in body else None,
        graph=parse_graph(body["steps"], body.get("connections")) if has_steps else None,
    )
