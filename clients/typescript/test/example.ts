// Type-checked by test/types.test.js (tsc --noEmit): the README's example, and the frame
// types narrowing as a client relies on.
import { WeftClient, type ServerFrame, type FrameOf, type ToolCard } from "../weft-client.js";

export async function example(url: string, apiKey: string): Promise<string> {
  const weft = new WeftClient({ url, apiKey });
  const turn = weft.chat("compare A and B", { permissionMode: "default" });
  let shown = "";
  for await (const frame of turn) {
    if (frame.type === "chunk" && !frame.parent_id) shown += frame.content;
    // @ts-expect-error a chunk has no tool_call_id: the frame types narrow by `type`
    if (frame.type === "chunk") shown += frame.tool_call_id;
    if (frame.type === "tool_approval_request") weft.allow(frame.tool_call_id);
  }
  const message = await turn.message;
  weft.close();
  return `${message.status}: ${turn.text} (${shown.length})`;
}

export function cardsOf(items: Array<{ kind: string } & Partial<ToolCard>>): number {
  return items.filter((i) => i.kind === "tool").length;
}

export function describe(frame: ServerFrame): string {
  switch (frame.type) {
    case "tool_call_update":
      return `${frame.name} ${frame.status}`;
    case "budget_exceeded":
      return `${frame.reason} ${frame.limit}`;
    case "error":
      return frame.code;
    default:
      return frame.type;
  }
}

export const cost = (frame: FrameOf<"cost_summary">): number => frame.cost_usd;
