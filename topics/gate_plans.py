"""§3 plan validation against the capability catalog (:func:`plan_problems`), and
:func:`printable`, the rule for a plan's text (§2 rule 10)."""

from __future__ import annotations

from typing import Any

import orjson

from topics.conditions import condition_problems
from topics.gate_checks import is_id
from topics.hostile import safe_key, safe_path
from topics.records import ExperiencePlan
from topics.registry import Registry
from topics.steps import PLANNER_EXPOSURES, missing_args, step_problem
from topics.text import visible

#: The most areas a plan may name (as many as a device's map may hold, §9.1).
MAX_PLAN_AREAS = 64


def plan_problems(
    plan: ExperiencePlan, registry: Registry, dump: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Every reason ``plan`` cannot run, as (path, problem) pairs; empty when it is valid.
    ``dump``: the plan's ``model_dump(mode="json")`` when the caller has it already.

    Checks (docs/CONTRACTS.md §3, §11): steps and ``allowed_action_contracts`` name catalog
    capabilities and operations exposed to a planner (not ``NO_GO``); required args are present
    and well typed (``area_ids`` within the plan's areas); step IDs are unique; ``depends_on``
    names earlier-declared or later steps of the plan and has no cycle; subscriptions name
    registry contracts and plan steps; no exclusive resource (the camera) is held by two
    capabilities (``resource_conflict``). A step's catalog check is :func:`topics.steps.step_problem`,
    as for dispatches and model replans."""
    problems: list[tuple[str, str]] = []
    areas = set(plan.areas)
    if len(areas) != len(plan.areas):
        problems.append(("areas", "duplicate area"))
    if len(plan.areas) > MAX_PLAN_AREAS:
        # a home's map has at most 64 areas (§9.1); per-area state stays bounded (§2 rule 8)
        problems.append(("areas", f"more than {MAX_PLAN_AREAS} areas"))
    step_ids: set[str] = set()
    for i, step in enumerate(plan.steps):
        if step.step_id in step_ids:
            problems.append((f"steps.{i}.step_id", "duplicate step_id"))
        step_ids.add(step.step_id)

    holders: dict[str, list[str]] = {}
    for i, step in enumerate(plan.steps):
        found = step_problem(registry, step.capability, step.operation, None, exposures=PLANNER_EXPOSURES)
        if found is not None:
            problems.append((f"steps.{i}.{found.where}", found.problem))
            continue
        cap = registry.capabilities[step.capability]
        for arg in missing_args(registry, step.capability, step.operation, step.args):
            problems.append((f"steps.{i}.args.{arg}", "missing required arg"))
        for arg, value in step.args.items():
            atype = registry.arg_types.get(arg)
            if atype == "str" and not (isinstance(value, str) and value):
                problems.append((f"steps.{i}.args.{arg}", "must be a non-empty string"))
            elif atype == "str_list":
                if not (isinstance(value, list) and value and all(is_id(v) for v in value)):
                    problems.append((f"steps.{i}.args.{arg}", "must be a non-empty list of IDs"))
                elif arg == "area_ids" and not set(value) <= areas:
                    problems.append((f"steps.{i}.args.{arg}", "names an area not in the plan's areas"))
        for res in cap.resources:
            if res in registry.plan_exclusive_resources:
                users = holders.setdefault(res, [])
                if step.capability not in users:
                    users.append(step.capability)
        for j, dep in enumerate(step.depends_on or ()):
            if dep not in step_ids:
                problems.append((f"steps.{i}.depends_on.{j}", "unknown step"))
            elif dep == step.step_id:
                problems.append((f"steps.{i}.depends_on.{j}", "a step cannot depend on itself"))

    for res, users in sorted(holders.items()):
        if len(users) > 1:
            problems.append(("steps", f"resource_conflict: {res} held by {' and '.join(users)}"))

    if _has_cycle(plan):
        problems.append(("steps", "depends_on has a cycle"))

    for i, contract in enumerate(plan.allowed_action_contracts):
        capability, _, operation = contract.partition(".")
        found = step_problem(registry, capability, operation, None, exposures=PLANNER_EXPOSURES)
        if found is not None:
            problems.append((f"allowed_action_contracts.{i}", found.problem))

    for i, sub in enumerate(plan.observation_policy.subscriptions):
        if sub.contract_id not in registry.contracts:
            problems.append((f"observation_policy.subscriptions.{i}.contract_id", "unknown contract"))
        for j, sid in enumerate(sub.step_ids):
            if sid not in step_ids:
                problems.append((f"observation_policy.subscriptions.{i}.step_ids.{j}", "unknown step"))

    if plan.area_names is not None:
        for area in plan.area_names:
            if area not in areas:
                problems.append((f"area_names.{safe_key(area)}", "names an area not in the plan's areas"))
    for path in _unprintable(plan.model_dump(mode="json") if dump is None else dump):
        problems.append((path, "not visible text (a control, format, invisible or bidirectional character)"))
    if plan.preconditions is not None:
        problems.extend(("preconditions", p) for p in condition_problems(plan.preconditions))
    return problems


#: Plan text is visible text (§2 rule 10): the rule of device context's text too (:mod:`topics.text`)
printable = visible


def _unprintable(dump: dict[str, Any]) -> list[str]:
    """The paths of the plan's strings (keys included) that are not :func:`printable` (``dump``:
    the plan's JSON form)."""
    try:
        text = orjson.dumps(dump).decode("utf-8")
    except orjson.JSONEncodeError:
        text = "\\"
    # an encoded form that is visible text without a backslash (orjson writes a control character
    # below U+0020 as an escape): every string and key is visible, no walk needed
    if "\\" not in text and visible(text):
        return []
    found: list[str] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(dump, ())]
    while stack:
        node, where = stack.pop()
        if type(node) is dict:
            for k, v in node.items():
                if not printable(k):
                    found.append(safe_path((*where, k)))
                stack.append((v, (*where, k)))
        elif type(node) is list:
            stack.extend((v, (*where, i)) for i, v in enumerate(node))
        elif type(node) is str and not printable(node):
            found.append(safe_path(where))
    return sorted(found)


def _has_cycle(plan: ExperiencePlan) -> bool:
    deps = {s.step_id: [d for d in (s.depends_on or ()) if d != s.step_id] for s in plan.steps}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in deps:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, idx = stack[-1]
            children = deps.get(node, [])
            if idx < len(children):
                stack[-1] = (node, idx + 1)
                child = children[idx]
                mark = state.get(child, 0)
                if mark == 1:
                    return True
                if mark == 0 and child in deps:
                    state[child] = 1
                    stack.append((child, 0))
            else:
                state[node] = 2
                stack.pop()
    return False
