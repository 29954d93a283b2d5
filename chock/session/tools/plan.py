"""plan: the steps the agent keeps its work in, each pending, in progress or done.

Each call replaces the whole plan and logs it as a `plan` event; the fold keeps the latest, which
`chock plan`, the terminal view and the page show (docs/log.md). Bounded, since every call puts it in the log
and the conversation again.
"""

from __future__ import annotations

from typing import Any, ClassVar

from chock.session.tools.tool import Context, Tool, ToolRefused

STATUSES = ("pending", "in_progress", "done")
MAX_STEPS = 50
MAX_STEP_CHARS = 500


class Plan(Tool):
    name = "plan"
    description = (
        "Keep your plan for the task: the whole list of steps, each pending, in_progress or done. Call it when "
        "you start on a task of several steps and whenever a step's status changes; each call replaces the plan, "
        "and the person sees it."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"step": {"type": "string"}, "status": {"type": "string", "enum": list(STATUSES)}},
                "required": ["step", "status"],
            },
        }
    }
    required = ("steps",)

    def summary(self, args: dict[str, Any]) -> str:
        steps = args.get("steps")
        return f"{len(steps)} steps" if isinstance(steps, list) else ""

    async def run(self, context: Context, args: dict[str, Any]) -> str:
        steps = args.get("steps")
        if not isinstance(steps, list) or not steps:
            raise ToolRefused("plan needs `steps`: a list of {step, status} objects")
        if len(steps) > MAX_STEPS:
            raise ToolRefused(f"a plan holds at most {MAX_STEPS} steps ({len(steps)} were given); group them")
        checked = []
        for number, step in enumerate(steps, 1):
            text = step.get("step") if isinstance(step, dict) else None
            status = step.get("status") if isinstance(step, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise ToolRefused(f"step {number} needs a `step`: what is to be done, in words")
            if status not in STATUSES:
                raise ToolRefused(f"step {number}'s status must be one of {', '.join(STATUSES)} (got {status!r})")
            if len(text) > MAX_STEP_CHARS:
                raise ToolRefused(f"step {number} is longer than {MAX_STEP_CHARS} characters; say it shorter")
            checked.append({"step": text.strip(), "status": status})
        context.emit("plan", steps=checked)
        counts = {status: sum(step["status"] == status for step in checked) for status in STATUSES}
        return f"plan updated: {counts['done']} done, {counts['in_progress']} in progress, {counts['pending']} pending"
