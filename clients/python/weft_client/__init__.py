"""weft-client: Weft's websocket protocol (docs/PROTOCOL.md) for asyncio scripts and tests."""

from .client import Turn, WeftClient, WeftError, websocket_url
from .view import TextItem, ToolCard, TurnView

__all__ = ["WeftClient", "Turn", "WeftError", "websocket_url", "TurnView", "TextItem", "ToolCard"]
