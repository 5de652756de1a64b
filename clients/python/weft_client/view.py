"""A turn's frames folded into what a chat UI draws: text blocks and nested tool cards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TextItem:
    text: str
    kind: str = "text"


@dataclass
class ToolCard:
    id: str
    name: str
    args: Any = None
    depth: int = 0
    parent_id: str | None = None
    status: str = "running"  # running, done, error
    result: str | None = None
    is_error: bool = False
    metadata: dict | None = None
    approval: dict | None = None  # {"category", "args", "decision"}
    items: list[TextItem | ToolCard] = field(default_factory=list)
    kind: str = "tool"


class TurnView:
    """The answer's ``items`` in the order they happened (a text block per round, tool cards
    holding their subtask's own items), plus the plan, budget notices, cost and error."""

    def __init__(self) -> None:
        self.message_id: str | None = None
        self.items: list[TextItem | ToolCard] = []
        self.cards: dict[str, ToolCard] = {}
        self.plan: dict | None = None
        self.budget: list[dict] = []
        self.cost: dict | None = None
        self.error: dict | None = None
        self.status = "running"

    @property
    def text(self) -> str:
        return "".join(item.text for item in self.items if isinstance(item, TextItem))

    @property
    def pending_approvals(self) -> list[ToolCard]:
        return [c for c in self.cards.values() if c.approval and not c.approval["decision"]]

    def apply(self, frame: dict) -> None:
        kind = frame.get("type")
        if kind == "turn_started":
            self.message_id = frame["message_id"]
        elif kind == "turn_resumed":
            # Taken up after its server stopped: `content` is the answer so far and replaces it.
            self.message_id = frame["message_id"]
            self._replace_text(frame.get("content") or "")
        elif kind == "chunk" and frame.get("content"):
            self._append_text(self._items_of(frame.get("parent_id")), frame["content"])
        elif kind == "tool_call_update":
            card = self._card(frame)
            if frame["status"] == "start":
                card.status = "running"
            else:
                card.is_error = bool(frame.get("is_error"))
                card.status = "error" if card.is_error else "done"
                card.result = frame.get("result")
                card.metadata = frame.get("metadata")
        elif kind == "tool_approval_request":
            self._card(frame).approval = {
                "category": frame["category"], "args": frame.get("args"), "decision": None}
        elif kind == "tool_approval_resolved":
            card = self.cards.get(frame["tool_call_id"])
            if card and card.approval:
                card.approval["decision"] = frame["decision"]
        elif kind == "planning_update" and not frame.get("parent_id"):
            self.plan = {"status": frame["status"], "content": frame.get("content", "")}
        elif kind == "budget_exceeded":
            self.budget.append(frame)
        elif kind == "cost_summary":
            self.cost = frame
        elif kind == "message":
            message = frame["message"]
            self.message_id = message["id"]
            self.status = message.get("status") or "completed"
            self._from_stored(message)
        elif kind == "error":
            self.error = {"code": frame["code"], "message": frame["message"]}

    def _items_of(self, parent_id: str | None) -> list:
        card = self.cards.get(parent_id) if parent_id else None
        return card.items if card else self.items

    @staticmethod
    def _append_text(items: list, text: str) -> None:
        if items and isinstance(items[-1], TextItem):
            items[-1].text += text
        else:
            items.append(TextItem(text))

    def _card(self, frame: dict) -> ToolCard:
        card = self.cards.get(frame["tool_call_id"])
        if card is None:
            card = ToolCard(id=frame["tool_call_id"], name=frame.get("name", ""),
                            args=frame.get("args"), depth=frame.get("depth") or 0,
                            parent_id=frame.get("parent_id"))
            self.cards[card.id] = card
            self._items_of(card.parent_id).append(card)
        return card

    def _replace_text(self, text: str) -> None:
        """Usually what is shown less a cut round's partial text: trimmed from the end, so the
        cards keep their places; otherwise one block replaces the root text."""
        shown = self.text
        if shown.startswith(text):
            excess = len(shown) - len(text)
            for i in range(len(self.items) - 1, -1, -1):
                item = self.items[i]
                if excess <= 0:
                    break
                if not isinstance(item, TextItem):
                    continue
                cut = min(excess, len(item.text))
                item.text = item.text[: len(item.text) - cut]
                excess -= cut
                if not item.text:
                    del self.items[i]
        else:
            self.items = [item for item in self.items if not isinstance(item, TextItem)]
            if text:
                self.items.insert(0, TextItem(text))

    def _from_stored(self, message: dict) -> None:
        """A stored message (a resume that missed more than the server keeps) stands for what
        was missed: its tree's cards and the rest of its text."""
        content = message.get("content")
        text = content if isinstance(content, str) else "".join(
            part.get("text", "") for part in content or [] if part.get("type") == "text")
        for node in (message.get("execution_tree") or {}).get("nodes", []):
            card = self._card({"tool_call_id": node["id"], "name": node["name"],
                               "parent_id": node.get("parent_id"), "args": node.get("args_preview")})
            if card.status == "running" and message.get("status") != "running":
                card.is_error = bool(node.get("is_error"))
                card.status = "error" if card.is_error else "done"
                card.result = node.get("result_preview")
        shown = self.text
        if len(text) > len(shown) and text.startswith(shown):
            self._append_text(self.items, text[len(shown):])
